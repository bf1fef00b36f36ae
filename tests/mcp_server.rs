//! Placeholder
#[allow(dead_code)]
#[path = "../examples/mcp_server.rs"]
mod example;
