//! The sizes a problem is checked and benched at: each size variable by name.

use std::collections::BTreeMap;

/// A size set: one value for every size variable, e.g. `{ rows = 4096, cols = 4096 }`.
pub type SizeSet = BTreeMap<String, i64>;
