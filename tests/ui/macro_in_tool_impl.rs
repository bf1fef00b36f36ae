use idem_tools::{Error, idempotent, tool_impl};

// A method a `macro_rules!` macro writes inside a `#[tool_impl]` block: the block cannot see
// it (it is a macro call when the block expands), so it gets neither the type's name nor the
// block's `same_service`; the messages say to give both on the method.
macro_rules! crud {
    ($name:ident) => {
        #[idempotent]
        pub async fn $name(&self, id: u32) -> Result<u32, Error> {
            Ok(id)
        }
    };
}

#[derive(Clone)]
pub struct Records;

#[tool_impl(same_service)]
impl Records {
    crud!(create);
}

fn main() {}
