//! `create` and `destroy`: one sandbox made and removed at a time, the sides in turn.

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
}
