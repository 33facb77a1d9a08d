pub mod fault;
pub mod fs;
pub mod lock;
