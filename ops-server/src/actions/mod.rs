//! Actions: the book (records + audit log), the executor (fair queue → storage) and the
//! fencing of master leadership terms.

pub mod audit;
pub mod book;
pub mod executor;
pub mod fencing;
