//! The shapes a node offers (`--shapes`) and its warm pool (`--warm-pool`).

/// Largest warm pool per shape.
pub const WARM_POOL_MAX: usize = 64;

/// Parses `--shapes` values (`VCPUxMIB`, e.g. `2x4096`), each on the grid of
/// [`sbx_api_types::validate::SHAPES`], into the shapes this node offers, in
/// grid order; none given: the whole grid.
pub fn parse_shapes(values: &[String]) -> Result<Vec<(u32, u32)>, String> {
    let mut chosen = Vec::new();
    for value in values.iter().map(|v| v.trim()).filter(|v| !v.is_empty()) {
        let shape = sbx_api_types::validate::parse_shape(value)
            .map_err(|e| format!("--shapes {value:?}: {e}"))?;
        if !chosen.contains(&shape) {
            chosen.push(shape);
        }
    }
    if chosen.is_empty() {
        return Ok(sbx_api_types::validate::SHAPES.to_vec());
    }
    Ok(sbx_api_types::validate::SHAPES
        .into_iter()
        .filter(|s| chosen.contains(s))
        .collect())
}

/// The warm pool setting (`--warm-pool`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WarmPool {
    /// Sized by sbxd (the default): one member of the smallest shape the node
    /// can hold, one more for each shape being created lately.
    Auto,
    /// Exactly these sizes per shape `(vcpu, memory_mb)`; empty: no pool.
    Fixed(std::collections::BTreeMap<(u32, u32), usize>),
}

impl Default for WarmPool {
    fn default() -> Self {
        WarmPool::Fixed(Default::default())
    }
}

/// Parses `--warm-pool` values: none or `auto` (sbxd sizes it), `none`/`off`
/// (no pool), or `VCPUxMIB=N` per shape (e.g. `1x1024=2`), each shape one of
/// `allowed` (`--shapes`).
pub fn parse_warm_pool(values: &[String], allowed: &[(u32, u32)]) -> Result<WarmPool, String> {
    let values: Vec<&str> = values
        .iter()
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
        .collect();
    match values.as_slice() {
        [] | ["auto"] => return Ok(WarmPool::Auto),
        ["none"] | ["off"] => return Ok(WarmPool::Fixed(Default::default())),
        _ => {}
    }
    let mut pool = std::collections::BTreeMap::new();
    for value in values {
        let bad =
            || format!("--warm-pool {value:?}: expected auto, none, or SHAPE=N, e.g. 1x1024=2");
        let (shape, n) = value.split_once('=').ok_or_else(bad)?;
        let (vcpu, mem) = shape.trim().split_once('x').ok_or_else(bad)?;
        let vcpu: u64 = vcpu.trim().parse().map_err(|_| bad())?;
        let mem: u64 = mem.trim().parse().map_err(|_| bad())?;
        let n: usize = n.trim().parse().map_err(|_| bad())?;
        let shape = sbx_api_types::validate::shape_in(allowed, vcpu, mem)
            .map_err(|e| format!("--warm-pool {value:?}: {e}"))?;
        if n > WARM_POOL_MAX {
            return Err(format!(
                "--warm-pool {value:?}: at most {WARM_POOL_MAX} per shape"
            ));
        }
        if pool.insert(shape, n).is_some() {
            return Err(format!("--warm-pool {value:?}: shape given twice"));
        }
    }
    pool.retain(|_, n| *n > 0);
    Ok(WarmPool::Fixed(pool))
}
