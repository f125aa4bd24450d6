//! `create` and `destroy`: one sandbox made and removed at a time, the sides in
//! turn; `create-first5`: what a new user sees on the default install.

use crate::stats::{Kind, Row, Side, Target};
use crate::{inherit, stats_failure, timed, timed_val, Bench};

impl Bench {
    /// `create` and `destroy`: one sandbox at a time, each side in turn.
    pub(crate) async fn lifecycle(&mut self) {
        let mut create = Row::new("create", Kind::Latency, Target::RatioAtMost(1.3));
        let mut destroy = Row::new("destroy", Kind::Latency, Target::None);
        for i in 0..self.warm + self.n {
            eprintln!("[create/destroy] {}/{}", i + 1, self.warm + self.n);
            if create.sbx.active() && destroy.sbx.active() {
                let body = self.create_body(self.sbx_name("life", i));
                match timed_val(self.api.create(body)).await {
                    Ok((id, d)) => {
                        create.sbx.take(i, self.warm, Ok(d));
                        let r = timed(self.api.destroy(&id)).await;
                        destroy.sbx.take(i, self.warm, r);
                    }
                    Err(e) => {
                        destroy.sbx = inherit(&stats_failure(&e), "create");
                        create.sbx.take(i, self.warm, Err(e));
                    }
                }
            }
            if create.raw.active() && destroy.raw.active() {
                match timed_val(self.raw.create()).await {
                    Ok((cid, d)) => {
                        create.raw.take(i, self.warm, Ok(d));
                        let r = timed(self.raw.delete(&cid)).await;
                        self.raw.forget(&cid);
                        destroy.raw.take(i, self.warm, r);
                    }
                    Err(e) => {
                        destroy.raw = Side::skipped("create failed");
                        create.raw.take(i, self.warm, Err(e));
                    }
                }
            }
        }
        self.put("create", create);
        self.put("destroy", destroy);
    }

    /// `create-first5`: five creates spaced 1 s apart, as a new user tries
    /// the default install (its warm pool is on unless configured off); each
    /// sandbox stays until the end, as a user's would. Raw: `runsc run` of
    /// the same bundle, cold (raw runsc has no pool).
    pub(crate) async fn first_creates(&mut self) {
        const N: usize = 5;
        let mut row = Row::new("create-first5", Kind::Latency, Target::P50Below(20.0));
        let mut made = Vec::new();
        for i in 0..N {
            eprintln!("[create-first5] {}/{N}", i + 1);
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            match timed_val(self.api.create(self.create_body(self.sbx_name("first", i)))).await {
                Ok((id, d)) => {
                    row.sbx.take(i, 0, Ok(d));
                    made.push(id);
                }
                Err(e) => row.sbx.take(i, 0, Err(e)),
            }
            match timed_val(self.raw.create()).await {
                Ok((cid, d)) => {
                    row.raw.take(i, 0, Ok(d));
                    let _ = self.raw.delete(&cid).await;
                    self.raw.forget(&cid);
                }
                Err(e) => row.raw.take(i, 0, Err(e)),
            }
        }
        for id in made {
            let _ = self.api.destroy(&id).await;
        }
        self.put("create-first5", row);
    }
}
