//! Per-sandbox disk limit. runsc keeps a sandbox's writable root layer in a
//! file under `--overlay2=root:dir=DIR`; sbxd loop-mounts a sparse ext4 image
//! of `--sandbox-disk-mb` on that DIR, so a sandbox that fills its disk gets
//! ENOSPC inside and nothing else notices (the data dir's filesystem, the
//! store and the other sandboxes keep their space).
//!
//! Formatting an image runs `mkfs.ext4` (~15 ms), too slow for the create
//! path: a few formatted images wait in a spare dir and are refilled in the
//! background, and a create renames one into its sandbox dir. The mount is
//! done in-process (loop ioctls and mount(2), about 1 ms) with the loop
//! device's autoclear flag, so unmounting also frees the loop device.

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Formatted images kept ready in the spare dir.
const SPARES: usize = 4;
/// Smallest disk `mkfs.ext4` and the filestore handle comfortably, MiB.
pub const MIN_DISK_MB: u64 = 16;
/// How often a loop device that another process took between "get free"
/// and "configure" is looked for again.
const LOOP_ATTEMPTS: usize = 16;

/// Disk failures.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// Host file work failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
    /// `mkfs.ext4` could not be run or failed.
    #[error("mkfs.ext4: {0}")]
    Mkfs(String),
}

impl DiskError {
    /// Whether the host filesystem holding the images is full.
    pub fn is_disk_full(&self) -> bool {
        match self {
            DiskError::Io { source, .. } => sbx_runsc::is_enospc(source),
            DiskError::Mkfs(message) => message.contains("No space left on device"),
        }
    }
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> DiskError {
    let context = context.into();
    move |source| DiskError::Io { context, source }
}

/// The supply of formatted images and the size they have.
pub struct Disks {
    size_bytes: u64,
    spare_dir: PathBuf,
    ready: Mutex<Vec<PathBuf>>,
    refilling: AtomicBool,
}

impl Disks {
    /// Opens the spare dir: unmounts and removes what a killed sbxd left
    /// there (half-made images, a probe mount, images of another size), fills
    /// it, and mounts one image once so that a host without loop devices
    /// fails here, at start, instead of at every create.
    pub fn open(spare_dir: &Path, size_mb: u64) -> Result<Arc<Disks>, DiskError> {
        std::fs::create_dir_all(spare_dir)
            .map_err(io(format!("creating {}", spare_dir.display())))?;
        unmount_under(spare_dir)?;
        let disks = Disks {
            size_bytes: size_mb.saturating_mul(1024 * 1024),
            spare_dir: spare_dir.to_path_buf(),
            ready: Mutex::new(Vec::new()),
            refilling: AtomicBool::new(false),
        };
        let entries =
            std::fs::read_dir(spare_dir).map_err(io(format!("reading {}", spare_dir.display())))?;
        for entry in entries.filter_map(|e| e.ok()) {
            let path = entry.path();
            let fits = path.extension().is_some_and(|e| e == "img")
                && entry
                    .metadata()
                    .is_ok_and(|m| m.is_file() && m.len() == disks.size_bytes);
            if fits {
                disks.lock().push(path);
                continue;
            }
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.map_err(io(format!("removing stale {}", path.display())))?;
        }
        disks.fill()?;
        disks.probe()?;
        Ok(Arc::new(disks))
    }

    /// With the limit off: unmounts and removes what an earlier run with a
    /// limit left in the spare dir.
    pub fn remove_spares(spare_dir: &Path) -> Result<(), DiskError> {
        unmount_under(spare_dir)?;
        match std::fs::remove_dir_all(spare_dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(io(format!("removing {}", spare_dir.display()))(e))
            }
            _ => Ok(()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<PathBuf>> {
        self.ready.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves a formatted image to `image` and mounts it on `mountpoint` (an
    /// existing empty dir); then refills the supply in the background.
    pub async fn attach(
        self: &Arc<Self>,
        image: &Path,
        mountpoint: &Path,
    ) -> Result<(), DiskError> {
        let started = std::time::Instant::now();
        let spare = self.lock().pop();
        let had_spare = spare.is_some();
        let source = match spare {
            Some(path) => path,
            // The supply ran dry (a burst of creates): format one here.
            None => {
                let this = self.clone();
                blocking(move || this.make_spare()).await?
            }
        };
        tokio::fs::rename(&source, image).await.map_err(io(format!(
            "moving {} to {}",
            source.display(),
            image.display()
        )))?;
        let (image, mountpoint) = (image.to_path_buf(), mountpoint.to_path_buf());
        let mounted = blocking(move || mount_image(&image, &mountpoint)).await;
        tracing::debug!(
            micros = started.elapsed().as_micros() as u64,
            had_spare,
            "sandbox disk attached"
        );
        self.refill();
        mounted
    }

    /// Starts a background refill unless one is running.
    fn refill(self: &Arc<Self>) {
        if self.refilling.swap(true, Ordering::AcqRel) {
            return;
        }
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = this.fill() {
                tracing::warn!(error = %e, "refilling spare sandbox disks");
            }
            this.refilling.store(false, Ordering::Release);
        });
    }

    /// Formats images until [`SPARES`] are ready.
    fn fill(&self) -> Result<(), DiskError> {
        while self.lock().len() < SPARES {
            let path = self.make_spare()?;
            self.lock().push(path);
        }
        Ok(())
    }

    /// Formats one image in the spare dir and returns its path. It is written
    /// under a `.tmp` name and renamed when complete, so that a crash never
    /// leaves a half-made image that looks ready.
    fn make_spare(&self) -> Result<PathBuf, DiskError> {
        let name = uuid::Uuid::new_v4();
        let tmp = self.spare_dir.join(format!("{name}.tmp"));
        let done = self.spare_dir.join(format!("{name}.img"));
        let made = format_image(&tmp, self.size_bytes).and_then(|()| {
            std::fs::rename(&tmp, &done).map_err(io(format!("renaming {}", tmp.display())))
        });
        if made.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        made.map(|()| done)
    }

    /// Mounts and unmounts one spare image: proves loop devices, mount and ext4 work here.
    fn probe(&self) -> Result<(), DiskError> {
        let Some(image) = self.lock().last().cloned() else {
            return Ok(());
        };
        let mountpoint = self.spare_dir.join("probe");
        std::fs::create_dir_all(&mountpoint)
            .map_err(io(format!("creating {}", mountpoint.display())))?;
        let mounted = mount_image(&image, &mountpoint);
        let unmounted = unmount_under(&mountpoint);
        let _ = std::fs::remove_dir(&mountpoint);
        mounted?;
        unmounted.map(|_| ())
    }
}

/// Runs blocking disk work off the async workers.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, DiskError> + Send + 'static,
) -> Result<T, DiskError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| DiskError::Io {
            context: "disk task".into(),
            source: std::io::Error::other(e.to_string()),
        })?
}

/// Creates a sparse file of `size` bytes at `path` and formats it as ext4.
fn format_image(path: &Path, size: u64) -> Result<(), DiskError> {
    let file = std::fs::File::create(path).map_err(io(format!("creating {}", path.display())))?;
    // No journal (the disk dies with its sandbox), no reserved blocks, no
    // resize reserve and few inodes (runsc keeps one file there): ~99.8% of
    // the size is usable and the image starts at ~0.2 MB on the host.
    // lazy_itable_init leaves inode tables unwritten; the mount's
    // noinit_itable keeps the kernel from writing them later.
    make_ext4(
        file,
        path,
        size,
        &[
            "-m",
            "0",
            "-N",
            "1024",
            "-O",
            "^has_journal,^resize_inode",
            "-E",
            "lazy_itable_init=1,nodiscard",
        ],
    )
}

/// Sizes the just created `file` at `path` to `size` bytes (sparse) and runs
/// `mkfs.ext4 -q -F MKFS_ARGS path` on it.
pub(super) fn make_ext4(
    file: std::fs::File,
    path: &Path,
    size: u64,
    mkfs_args: &[&str],
) -> Result<(), DiskError> {
    file.set_len(size)
        .map_err(io(format!("sizing {}", path.display())))?;
    drop(file);
    let out = std::process::Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .args(mkfs_args)
        .arg(path)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| DiskError::Mkfs(format!("cannot run it: {e}")))?;
    if !out.status.success() {
        return Err(DiskError::Mkfs(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

// Loop device ABI (linux/loop.h); the libc crate does not define it.
const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LO_FLAGS_AUTOCLEAR: u32 = 4;

#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

const _: () = assert!(std::mem::size_of::<LoopConfig>() == 304);

fn c_path(path: &Path) -> Result<CString, DiskError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| DiskError::Io {
        context: format!("path {} has a NUL byte", path.display()),
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    })
}

/// Attaches `image` to a free loop device with autoclear set and returns the
/// open device: it is detached when its last user (this fd or a mount) goes.
fn attach_loop(image: &Path) -> Result<(std::fs::File, PathBuf), DiskError> {
    let backing = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(image)
        .map_err(io(format!("opening {}", image.display())))?;
    let control = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/loop-control")
        .map_err(io(
            "opening /dev/loop-control (loop devices are needed for the sandbox disk limit)",
        ))?;
    let mut last = std::io::Error::from(std::io::ErrorKind::ResourceBusy);
    for _ in 0..LOOP_ATTEMPTS {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns a device number.
        let n = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE) };
        if n < 0 {
            return Err(io("finding a free loop device")(
                std::io::Error::last_os_error(),
            ));
        }
        let dev_path = PathBuf::from(format!("/dev/loop{n}"));
        let device = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&dev_path)
            .map_err(io(format!("opening {}", dev_path.display())))?;
        // SAFETY: an all-zero loop_config is valid (no offset, no size limit, no name).
        let mut config: LoopConfig = unsafe { std::mem::zeroed() };
        config.fd = backing.as_raw_fd() as u32;
        config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
        // SAFETY: LOOP_CONFIGURE reads a loop_config we own for the duration of the call.
        let rc = unsafe { libc::ioctl(device.as_raw_fd(), LOOP_CONFIGURE, &config) };
        if rc == 0 {
            return Ok((device, dev_path));
        }
        last = std::io::Error::last_os_error();
        // EBUSY: another process configured this device after we were told it
        // was free; ask for another one. Anything else is final.
        if last.raw_os_error() != Some(libc::EBUSY) {
            break;
        }
    }
    Err(io(format!(
        "attaching {} to a loop device (LOOP_CONFIGURE needs Linux 5.8 or later)",
        image.display()
    ))(last))
}

/// Loop-mounts the ext4 `image` on `mountpoint` (nodev, nosuid).
pub fn mount_image(image: &Path, mountpoint: &Path) -> Result<(), DiskError> {
    let (device, dev_path) = attach_loop(image)?;
    let source = c_path(&dev_path)?;
    let target = c_path(mountpoint)?;
    let fstype = c"ext4";
    // noinit_itable: no background zeroing of inode tables (the image is
    // sparse, they read as zeros). discard: blocks freed inside the sandbox
    // are punched out of the image, so the host gets the space back at once.
    let data = c"noinit_itable,discard";
    // Not noexec: the Sentry maps guest files from the filestore with
    // PROT_EXEC, so a noexec mount makes every binary or shared library
    // written inside the sandbox die with SIGSEGV (measured). Only runsc
    // opens this dir; no host process executes from it.
    let flags = libc::MS_NODEV | libc::MS_NOSUID;
    // SAFETY: every pointer is a valid NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    };
    // The mount (if any) now holds the loop device; closing ours lets
    // autoclear detach it when that mount goes, or at once if it failed.
    drop(device);
    if rc != 0 {
        return Err(io(format!(
            "mounting {} on {}",
            image.display(),
            mountpoint.display()
        ))(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Unmounts every mount at or below `dir` (deepest first; stacked mounts
/// each), read from `/proc/self/mountinfo`. A mount still in use is
/// detached lazily (it goes, with its loop device, when its last user does).
/// Returns how many were unmounted.
pub fn unmount_under(dir: &Path) -> Result<usize, DiskError> {
    // mountinfo shows resolved paths.
    let dir = match std::fs::canonicalize(dir) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io(format!("resolving {}", dir.display()))(e)),
    };
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(io("reading /proc/self/mountinfo"))?;
    let mut points: Vec<PathBuf> = mount_points(&mountinfo)
        .into_iter()
        .filter(|p| p.starts_with(&dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    let started = std::time::Instant::now();
    for point in &points {
        unmount(point)?;
    }
    if !points.is_empty() {
        tracing::debug!(
            micros = started.elapsed().as_micros() as u64,
            mounts = points.len(),
            under = %dir.display(),
            "unmounted"
        );
    }
    Ok(points.len())
}

fn unmount(point: &Path) -> Result<(), DiskError> {
    let target = c_path(point)?;
    // SAFETY: `target` is a valid NUL-terminated path.
    if unsafe { libc::umount2(target.as_ptr(), libc::UMOUNT_NOFOLLOW) } == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        // Already gone (a concurrent destroy).
        Some(libc::EINVAL) | Some(libc::ENOENT) => Ok(()),
        Some(libc::EBUSY) => {
            tracing::warn!(mount = %point.display(), "mount still in use; detaching it lazily");
            // SAFETY: as above.
            let rc =
                unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) };
            if rc == 0 {
                Ok(())
            } else {
                Err(io(format!("detaching {}", point.display()))(
                    std::io::Error::last_os_error(),
                ))
            }
        }
        _ => Err(io(format!("unmounting {}", point.display()))(err)),
    }
}

/// Mount points listed in a `/proc/PID/mountinfo` text (fifth field, unescaped).
pub fn mount_points(mountinfo: &str) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(unescape_octal(field)))
        .collect()
}

/// Undoes the kernel's `\ooo` escaping of space, tab, newline and backslash.
fn unescape_octal(field: &str) -> std::ffi::OsString {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let code = bytes.get(i + 1..i + 4).and_then(|digits| {
            let text = std::str::from_utf8(digits).ok()?;
            u8::from_str_radix(text, 8).ok()
        });
        match (bytes[i], code) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    std::ffi::OsString::from_vec(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_mount_points_are_unescaped() {
        let text = "\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
24 27 0:6 / /dev rw,relatime - devtmpfs devtmpfs rw,mode=755
90 27 7:3 / /var/lib/sbx/sandboxes/0b6c4b7e-1111-4222-8333-444455556666/overlay rw,nosuid,nodev,noexec,relatime shared:5 - ext4 /dev/loop3 rw,discard
91 27 7:4 / /data\\040dir/with\\011tab\\012nl\\134back rw - ext4 /dev/loop4 rw
";
        let points = mount_points(text);
        assert_eq!(
            points,
            vec![
                PathBuf::from("/"),
                PathBuf::from("/dev"),
                PathBuf::from(
                    "/var/lib/sbx/sandboxes/0b6c4b7e-1111-4222-8333-444455556666/overlay"
                ),
                PathBuf::from("/data dir/with\ttab\nnl\\back"),
            ]
        );
        let under: Vec<_> = points
            .iter()
            .filter(|p| p.starts_with("/var/lib/sbx/sandboxes"))
            .collect();
        assert_eq!(under.len(), 1);
        // Component-wise: a sibling with the same prefix is not "under".
        assert!(
            !PathBuf::from("/var/lib/sbx/sandboxes-old/x").starts_with("/var/lib/sbx/sandboxes")
        );
    }

    #[test]
    fn malformed_escapes_are_kept_as_they_are() {
        assert_eq!(unescape_octal("a\\9zz"), std::ffi::OsString::from("a\\9zz"));
        assert_eq!(
            unescape_octal("end\\04"),
            std::ffi::OsString::from("end\\04")
        );
        assert!(mount_points("short line\n").is_empty());
    }
}
