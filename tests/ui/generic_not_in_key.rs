use idem_tools::{idempotent, tool_impl};
use serde::{Serialize, de::DeserializeOwned};

/// `R` is only in the return type: `create::<Team>("ada")` would replay
/// `create::<User>("ada")`'s record, decoded as a team.
#[idempotent]
async fn create<R: Serialize + DeserializeOwned + From<u64> + Send + 'static>(
    name: String,
) -> Result<R, idem_tools::Error> {
    let _ = name;
    Ok(R::from(1))
}

/// `N` is in no argument: `alloc::<64>` would replay `alloc::<1>`.
#[idempotent]
async fn alloc<const N: usize>(name: String) -> Result<usize, idem_tools::Error> {
    let _ = name;
    Ok(N)
}

/// `T` is in an argument, but one left out of the key; `'a` is a lifetime, never compared.
#[idempotent(ignore(trace))]
async fn parse<'a, T: std::str::FromStr + Serialize + DeserializeOwned + Send>(
    text: &'a str,
    trace: Option<T>,
) -> Result<String, idem_tools::Error> {
    let _ = trace;
    Ok(text.to_owned())
}

#[derive(Serialize)]
pub struct Block<const N: usize>(Vec<u8>);

/// Fine: `T` is in the key through `Vec<T>`, `N` through `Block<N>`.
#[idempotent]
async fn store<T: Serialize + Send, const N: usize>(
    items: Vec<T>,
    block: Block<N>,
) -> Result<usize, idem_tools::Error> {
    Ok(items.len() + block.0.len())
}

/// A trait's default method is checked the same way.
pub trait Factory {
    #[idempotent(name = "factory_make", same_service)]
    async fn make<R: Serialize + DeserializeOwned + Default + Send>(
        &self,
        id: u64,
    ) -> Result<R, idem_tools::Error> {
        let _ = id;
        Ok(R::default())
    }
}

/// And a method of a `#[tool_impl]` block (whose own parameters are checked elsewhere).
#[derive(Clone)]
pub struct Directory;

#[tool_impl(same_service)]
impl Directory {
    #[idempotent]
    pub async fn lookup<R: Serialize + DeserializeOwned + Default + Send + 'static>(
        &self,
        id: u64,
    ) -> Result<R, idem_tools::Error> {
        let _ = id;
        Ok(R::default())
    }
}

fn main() {}
