use idem_tools::{Error, idempotent, read_only, tool_impl};

#[derive(Clone)]
pub struct Desk;

// A tool with an error keeps its descriptor: `tools![]` below reports nothing more (it used to
// say that `Desk::reserve` and `search` are not annotated).
#[tool_impl(same_service)]
impl Desk {
    #[idempotent(ttl = "forever")]
    pub async fn reserve(&self, seat: u32) -> Result<u32, Error> {
        Ok(seat)
    }
}

#[read_only(ttl = "1h")]
pub fn search(query: &str) -> usize {
    query.len()
}

#[derive(Clone)]
pub struct Server;

// So does a block with an error in its own options: its methods without a visibility, whose
// descriptors it emits, are listed without another error.
#[tool_impl(same_servce)]
impl Server {
    #[idempotent(same_service)]
    async fn book(&self, room: u32) -> Result<u32, Error> {
        Ok(room)
    }
}

const TOOLS: &[idem_tools::ToolInfo] = idem_tools::tools![Desk::reserve, search, Server::book];

fn main() {
    let _ = TOOLS;
}
