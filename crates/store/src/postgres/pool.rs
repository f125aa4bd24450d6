//! A fixed set of connections, each owned by a worker thread outside any async runtime.

use crate::StoreError;
use postgres::error::SqlState;
use postgres::types::ToSql;
use postgres::{Client, Config, NoTls, Row, Statement};
use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// Work for one connection; it sends its own answer.
type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// A connection idle this long is checked (one empty query) before it is used:
/// a server restarted meanwhile has closed it, and the client learns that only
/// when it next talks to the server.
const IDLE_CHECK: Duration = Duration::from_secs(5);

/// How long that check may take before the connection counts as lost.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// Statements kept prepared per connection. The store's SQL is a fixed set of
/// strings (a few dozen); past this many the cache starts over rather than grow.
const MAX_STATEMENTS: usize = 256;

/// A connection and the statements prepared on it.
///
/// `Client::execute` with SQL text prepares it first: two round trips to the
/// server per statement. The session prepares each text once and reuses it,
/// so a statement costs one. Everything else of [`Client`] is reached
/// through `Deref` (transactions prepare as before).
pub struct Session {
    client: Client,
    statements: HashMap<String, Statement>,
}

impl Deref for Session {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

impl DerefMut for Session {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}

impl Session {
    fn new(client: Client) -> Session {
        Session {
            client,
            statements: HashMap::new(),
        }
    }

    /// Like [`Client::execute`], on a statement prepared once per connection.
    pub fn execute(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, postgres::Error> {
        self.cached(sql, |c, s| c.execute(s, params))
    }

    /// Like [`Client::query`], on a statement prepared once per connection.
    pub fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error> {
        self.cached(sql, |c, s| c.query(s, params))
    }

    /// Like [`Client::query_opt`], on a statement prepared once per connection.
    pub fn query_opt(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, postgres::Error> {
        self.cached(sql, |c, s| c.query_opt(s, params))
    }

    /// Like [`Client::query_one`], on a statement prepared once per connection.
    pub fn query_one(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, postgres::Error> {
        self.cached(sql, |c, s| c.query_one(s, params))
    }

    fn cached<T>(
        &mut self,
        sql: &str,
        run: impl Fn(&mut Client, &Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, postgres::Error> {
        let statement = self.statement(sql)?;
        match run(&mut self.client, &statement) {
            // Another sbxd migrated the schema under a prepared statement whose
            // result columns changed ("cached plan must not change result
            // type"): prepare afresh, once.
            Err(e) if e.code() == Some(&SqlState::FEATURE_NOT_SUPPORTED) => {
                self.statements.clear();
                let statement = self.statement(sql)?;
                run(&mut self.client, &statement)
            }
            other => other,
        }
    }

    /// `sql` prepared on this connection, for use inside a transaction of it.
    pub fn statement(&mut self, sql: &str) -> Result<Statement, postgres::Error> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        if self.statements.len() >= MAX_STATEMENTS {
            self.statements.clear();
        }
        let s = self.client.prepare(sql)?;
        self.statements.insert(sql.to_string(), s.clone());
        Ok(s)
    }
}

/// One worker's connection, opened on first use and again after it is lost.
pub(super) struct Connection {
    config: Config,
    client: Option<Session>,
    /// The pool's loss count when `client` was opened.
    opened_at_loss: u64,
    last_used: Instant,
    /// How many times any worker lost its connection; shared by the pool.
    losses: Arc<AtomicU64>,
}

impl Connection {
    fn client(&mut self) -> Result<&mut Session, StoreError> {
        let losses = self.losses.load(Ordering::SeqCst);
        let reusable = match self.client.take() {
            // Another worker lost its connection since this one was opened: the
            // server went away (or ended every session), so this one is most
            // likely dead too, without knowing it. Replaced before it fails a call.
            Some(_) if self.opened_at_loss != losses => None,
            Some(c) if c.is_closed() => None,
            Some(mut c) if self.last_used.elapsed() >= IDLE_CHECK => {
                c.is_valid(CHECK_TIMEOUT).is_ok().then_some(c)
            }
            other => other,
        };
        let client = match reusable {
            Some(c) => c,
            // This is how sbxd recovers once the database returns.
            None => {
                let c = self.config.connect(NoTls).map_err(connect_error)?;
                self.opened_at_loss = losses;
                Session::new(c)
            }
        };
        self.last_used = Instant::now();
        Ok(self.client.insert(client))
    }

    /// Drops the connection after a call failed as unavailable. When the
    /// connection itself is gone (the server ended it or went away, not a
    /// deadlock or a serialization failure) the other workers replace theirs too.
    fn failed(&mut self, session_ended: bool) {
        let closed = self.client.take().is_some_and(|c| c.is_closed());
        // `is_closed` may not know yet: the server's "terminating connection"
        // error arrives before the socket's end, so the error counts too.
        if closed || session_ended {
            self.losses.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Whether an unavailable error means the server ended the session (it
/// shut down, or an administrator terminated the backend) or the connection
/// broke, rather than a deadlock or serialization failure on a live one.
fn ended_the_session(e: &(dyn std::error::Error + 'static)) -> bool {
    let Some(pg) = e.downcast_ref::<postgres::Error>() else {
        return false;
    };
    match pg.as_db_error() {
        Some(db) => {
            let code = db.code();
            code.code().starts_with("08")
                || [
                    SqlState::ADMIN_SHUTDOWN,
                    SqlState::CRASH_SHUTDOWN,
                    SqlState::CANNOT_CONNECT_NOW,
                ]
                .contains(code)
        }
        None => true,
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
pub struct Pool {
    jobs: Mutex<mpsc::Sender<Job>>,
}

impl Pool {
    /// Starts `size` workers; none connects until it gets a job.
    pub fn new(config: Config, size: usize) -> Pool {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let losses = Arc::new(AtomicU64::new(0));
        for i in 0..size.max(1) {
            let rx = Arc::clone(&rx);
            let mut conn = Connection {
                config: config.clone(),
                client: None,
                opened_at_loss: 0,
                last_used: Instant::now(),
                losses: Arc::clone(&losses),
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
    pub fn run<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Session) -> Result<T, StoreError> + Send + 'static,
    {
        let (tx, rx) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |conn: &mut Connection| {
            let result = conn.client().and_then(f);
            if let Err(StoreError::Unavailable(e)) = &result {
                // Reconnect on the next job rather than trust a client that just failed.
                conn.failed(ended_the_session(e.as_ref()));
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
