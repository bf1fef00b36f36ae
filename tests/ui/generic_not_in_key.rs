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

/// Fine: `T` is in an argument the author left out of the key, saying it does not identify
/// the action (a client generic for tests, say); `'a` is a lifetime, never compared.
#[idempotent(ignore(trace))]
async fn parse<'a, T: std::str::FromStr + Serialize + DeserializeOwned + Send>(
    text: &'a str,
    trace: Option<T>,
) -> Result<String, idem_tools::Error> {
    let _ = trace;
    Ok(text.to_owned())
}

pub trait Entity: Send + Sync + 'static {
    type Id: Serialize + Send + Sync;
    const NAME: &'static str;
}

/// `T` only through its associated type, the same (`u64`) for every entity: `fetch::<Team>(1)`
/// would replay `fetch::<User>(1)`; `<T as Entity>::Id` and `PhantomData<T>` alike.
#[idempotent]
async fn fetch<T: Entity>(id: T::Id) -> Result<String, idem_tools::Error> {
    let _ = id;
    Ok(T::NAME.to_owned())
}

#[idempotent]
async fn fetch_qualified<T: Entity>(id: <T as Entity>::Id) -> Result<String, idem_tools::Error> {
    let _ = id;
    Ok(T::NAME.to_owned())
}

#[idempotent]
async fn mark<T: Entity>(
    kind: std::marker::PhantomData<T>,
    id: u64,
) -> Result<String, idem_tools::Error> {
    let _ = (kind, id);
    Ok(T::NAME.to_owned())
}

/// Fine: `E` is only the error type, which is not recorded (without `cache_errors`).
#[idempotent]
async fn lookup<E: From<idem_tools::Error> + Send + 'static>(id: u64) -> Result<u64, E> {
    Ok(id)
}

/// With `cache_errors` the error is recorded: `E` must be in the key.
#[derive(Serialize, serde::Deserialize)]
pub struct Failure;

impl From<idem_tools::Error> for Failure {
    fn from(_: idem_tools::Error) -> Self {
        Failure
    }
}

#[idempotent(cache_errors)]
async fn lookup_cached<E: From<idem_tools::Error> + Serialize + DeserializeOwned + Send + 'static>(
    id: u64,
) -> Result<u64, E> {
    Ok(id)
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
