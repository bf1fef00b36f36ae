struct Server;

#[idem_tools::tool_impl]
fn search(server: &Server, query: &str) -> usize {
    let _ = server;
    query.len()
}

#[idem_tools::tool_impl]
struct NotAnImpl;

fn main() {
    let _ = search(&Server, "x");
    let _ = NotAnImpl;
}
