use idem_tools::{read_only, tool_impl};

// A `&mut` inside a parameter's type, or a receiver typed `&mut Self`, could change state too.
#[read_only]
fn search(cache: Option<&mut Vec<String>>, query: &str) -> usize {
    cache.map_or(0, |cache| {
        cache.push(query.to_owned());
        cache.len()
    })
}

pub struct Index(Vec<String>);

#[tool_impl]
impl Index {
    #[read_only]
    pub fn lookup(self: &mut Self, query: &str) -> usize {
        self.0.push(query.to_owned());
        self.0.len()
    }
}

fn main() {}
