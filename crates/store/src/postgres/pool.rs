//! A fixed set of connections, each owned by a worker thread outside any async runtime.

use crate::StoreError;
use postgres::{Client, Config, NoTls};
use std::panic::AssertUnwindSafe;
use std::sync::{mpsc, Arc, Mutex};

/// Work for one connection; it sends its own answer.
type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// One worker's connection, opened on first use and again after it is lost.
pub(super) struct Connection {
    config: Config,
    client: Option<Client>,
}

impl Connection {
    fn client(&mut self) -> Result<&mut Client, StoreError> {
        let client = match self.client.take() {
            Some(c) if !c.is_closed() => c,
            // A closed client (server restarted, connection reset) is replaced:
            // this is how sbxd recovers once the database returns.
            _ => self.config.connect(NoTls).map_err(connect_error)?,
        };
        Ok(self.client.insert(client))
    }
}

/// Why the server turned a connection away for good: no retry mends these.
#[derive(Debug, thiserror::Error)]
enum Refused {
    /// SQLSTATE class 28: wrong user or password, or pg_hba.conf says no.
    #[error("the server refused the login (check the user and password of the database URL)")]
    Login(#[source] postgres::Error),
    /// SQLSTATE 3D000.
    #[error("the database named in the URL does not exist on that server")]
    NoDatabase(#[source] postgres::Error),
}

/// A failure to connect: unavailable (retryable) unless the server refused who we
/// are or what we asked for, which no retry mends.
fn connect_error(e: postgres::Error) -> StoreError {
    let code = e.as_db_error().map(|db| db.code().code().to_string());
    match code.as_deref() {
        // 28: invalid authorization (wrong user or password); 3D000: no such database.
        Some(c) if c.starts_with("28") => StoreError::Database(Box::new(Refused::Login(e))),
        Some("3D000") => StoreError::Database(Box::new(Refused::NoDatabase(e))),
        _ => StoreError::Unavailable(Box::new(e)),
    }
}

/// Hands jobs to the worker threads and waits for their answers.
pub(super) struct Pool {
    jobs: Mutex<mpsc::Sender<Job>>,
}

impl Pool {
    /// Starts `size` workers; none connects until it gets a job.
    pub(super) fn new(config: Config, size: usize) -> Pool {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..size.max(1) {
            let rx = Arc::clone(&rx);
            let mut conn = Connection {
                config: config.clone(),
                client: None,
            };
            let spawned = std::thread::Builder::new()
                .name(format!("sbx-pg-{i}"))
                .spawn(move || loop {
                    // Only the receive holds the lock: the job runs with it released.
                    let job = match rx.lock().unwrap_or_else(|p| p.into_inner()).recv() {
                        Ok(job) => job,
                        Err(_) => return, // the store was dropped
                    };
                    if std::panic::catch_unwind(AssertUnwindSafe(|| job(&mut conn))).is_err() {
                        // The caller sees the dropped answer channel; a connection in an
                        // unknown state (half a transaction) is not reused.
                        conn.client = None;
                    }
                });
            // Fewer workers only means less concurrency; with none, every call fails as
            // unavailable below, which the caller reports.
            drop(spawned);
        }
        Pool {
            jobs: Mutex::new(tx),
        }
    }

    /// Runs `f` on a connection and waits for its result.
    pub(super) fn run<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Client) -> Result<T, StoreError> + Send + 'static,
    {
        let (tx, rx) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |conn: &mut Connection| {
            let result = conn.client().and_then(f);
            if matches!(result, Err(StoreError::Unavailable(_))) {
                // Reconnect on the next job rather than trust a client that just failed.
                conn.client = None;
            }
            let _ = tx.send(result);
        });
        self.jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(job)
            .map_err(|_| StoreError::Unavailable("no PostgreSQL worker is running".into()))?;
        rx.recv().map_err(|_| {
            StoreError::Database("a PostgreSQL worker panicked during the call".into())
        })?
    }
}
