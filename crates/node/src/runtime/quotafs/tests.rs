//! The passthrough's accounting on a plain temporary directory standing in
//! for rclone's mount (a fake source: no FUSE, no S3); the real stack is
//! tested in crates/daemon/tests/volumes_s3.rs.

use super::inodes::ROOT;
use super::ops::{walk, Passthrough};
use std::ffi::OsStr;

const RW_CREATE: i32 = libc::O_RDWR | libc::O_CREAT;

fn enospc(e: std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOSPC)
}

#[test]
fn the_walk_counts_regular_files_in_every_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a"), vec![0u8; 100]).unwrap();
    std::fs::create_dir_all(dir.path().join("d/e")).unwrap();
    std::fs::write(dir.path().join("d/e/b"), vec![0u8; 23]).unwrap();
    assert_eq!(walk(dir.path()).unwrap(), 123);
}

#[test]
fn a_write_past_the_limit_is_refused_whole_and_earlier_bytes_stay() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Passthrough::new(dir.path(), 1000, 0);
    let (e, fh) = fs.create(ROOT, OsStr::new("f"), 0o644, RW_CREATE).unwrap();
    assert_eq!(fs.write(fh, 0, &[1u8; 600]).unwrap(), 600);
    assert!(enospc(fs.write(fh, 600, &[2u8; 500]).unwrap_err()));
    // Overwriting in place grows nothing: allowed.
    assert_eq!(fs.write(fh, 0, &[3u8; 600]).unwrap(), 600);
    assert_eq!(fs.write(fh, 600, &[4u8; 400]).unwrap(), 400);
    assert!(enospc(fs.write(fh, 1000, &[5u8; 1]).unwrap_err()));
    fs.release(fh);
    assert_eq!(fs.used(), 1000);
    assert_eq!(std::fs::metadata(dir.path().join("f")).unwrap().len(), 1000);
    assert_eq!(fs.getattr(e.ino, None).unwrap().len(), 1000);
    assert_eq!(fs.usage(), (1000, 0));
}

#[test]
fn unlink_truncate_and_rename_over_give_bytes_back() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Passthrough::new(dir.path(), 1000, 0);
    let (a, fa) = fs.create(ROOT, OsStr::new("a"), 0o644, RW_CREATE).unwrap();
    fs.write(fa, 0, &[0u8; 400]).unwrap();
    let (_, fb) = fs.create(ROOT, OsStr::new("b"), 0o644, RW_CREATE).unwrap();
    fs.write(fb, 0, &[0u8; 500]).unwrap();
    assert_eq!(fs.used(), 900);
    // Truncate down through setattr(size).
    fs.setattr(a.ino, Some(fa), None, None, None, Some(100), None, None)
        .unwrap();
    assert_eq!(fs.used(), 600);
    // Truncate up past the limit: refused.
    let e = fs
        .setattr(a.ino, None, None, None, None, Some(600), None, None)
        .unwrap_err();
    assert!(enospc(e));
    // Rename a over b: b's 500 bytes go.
    fs.rename(ROOT, OsStr::new("a"), ROOT, OsStr::new("b"), 0)
        .unwrap();
    assert_eq!(fs.used(), 100);
    assert_eq!(fs.lookup(ROOT, OsStr::new("b")).unwrap().ino, a.ino);
    fs.unlink(ROOT, OsStr::new("b")).unwrap();
    assert_eq!(fs.used(), 0);
    fs.release(fa);
    fs.release(fb);
}

#[test]
fn open_with_o_trunc_gives_bytes_back() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), vec![0u8; 700]).unwrap();
    let fs = Passthrough::new(dir.path(), 1000, walk(dir.path()).unwrap());
    let e = fs.lookup(ROOT, OsStr::new("f")).unwrap();
    let fh = fs.open(e.ino, libc::O_WRONLY | libc::O_TRUNC).unwrap();
    assert_eq!(fs.used(), 0);
    assert_eq!(fs.write(fh, 0, &[0u8; 1000]).unwrap(), 1000);
    fs.release(fh);
}

#[test]
fn fallocate_is_charged_like_a_write() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Passthrough::new(dir.path(), 1 << 20, 0);
    let (_, fh) = fs.create(ROOT, OsStr::new("f"), 0o644, RW_CREATE).unwrap();
    assert!(enospc(fs.fallocate(fh, 0, 2 << 20, 0).unwrap_err()));
    fs.fallocate(fh, 0, 4096, 0).unwrap();
    assert_eq!(fs.used(), 4096);
    fs.release(fh);
}

#[test]
fn directories_list_rename_and_remove() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Passthrough::new(dir.path(), 1000, 0);
    let d = fs.mkdir(ROOT, OsStr::new("d"), 0o755).unwrap();
    let (f, fh) = fs.create(d.ino, OsStr::new("f"), 0o644, RW_CREATE).unwrap();
    fs.write(fh, 0, b"hello").unwrap();
    fs.fsync(fh, false).unwrap();
    fs.flush(fh).unwrap();
    fs.release(fh);
    let dh = fs.opendir(ROOT).unwrap();
    let names: Vec<_> = fs
        .readdir(dh)
        .unwrap()
        .iter()
        .map(|e| e.name.clone())
        .collect();
    assert_eq!(names, vec![".", "..", "d"]);
    fs.releasedir(dh);
    fs.rename(ROOT, OsStr::new("d"), ROOT, OsStr::new("e"), 0)
        .unwrap();
    // The file's number follows it into the renamed directory.
    let fh = fs.open(f.ino, libc::O_RDONLY).unwrap();
    assert_eq!(fs.read(fh, 0, 100).unwrap(), b"hello");
    fs.release(fh);
    assert!(fs.rmdir(ROOT, OsStr::new("e")).is_err(), "not empty");
    let e = fs.lookup(ROOT, OsStr::new("e")).unwrap();
    fs.unlink(e.ino, OsStr::new("f")).unwrap();
    fs.rmdir(ROOT, OsStr::new("e")).unwrap();
    assert_eq!(fs.used(), 0);
}

#[test]
fn names_that_leave_the_directory_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Passthrough::new(dir.path(), 1000, 0);
    for bad in ["..", "a/../../x", "."] {
        let e = fs.lookup(ROOT, OsStr::new(bad)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{bad}");
    }
}

#[test]
fn over_the_limit_at_mount_refuses_growth_until_files_go() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("big"), vec![0u8; 1500]).unwrap();
    let fs = Passthrough::new(dir.path(), 1000, walk(dir.path()).unwrap());
    let (_, fh) = fs.create(ROOT, OsStr::new("n"), 0o644, RW_CREATE).unwrap();
    assert!(enospc(fs.write(fh, 0, b"x").unwrap_err()));
    fs.unlink(ROOT, OsStr::new("big")).unwrap();
    assert_eq!(fs.write(fh, 0, b"x").unwrap(), 1);
    fs.release(fh);
}
