//! Text → features → 64-bit simhash.
