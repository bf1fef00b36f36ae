use idem_tools::{idempotent, tool_impl};

#[derive(Clone)]
struct Pager;

#[tool_impl(same_service)]
impl Pager {
    /// A `&self` method with owned arguments may run detached: `release_on_cancel` needs
    /// `attached`.
    #[idempotent(release_on_cancel)]
    pub async fn page(&self, service: String) -> Result<usize, idem_tools::Error> {
        Ok(service.len())
    }

    /// With `attached`, it is fine.
    #[idempotent(attached, release_on_cancel)]
    pub async fn page_again(&self, service: String) -> Result<usize, idem_tools::Error> {
        Ok(service.len())
    }
}

fn main() {}
