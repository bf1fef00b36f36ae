use idem_tools::read_only;

#[read_only]
fn search(cache: &mut Vec<String>, query: &str) -> usize {
    cache.push(query.to_owned());
    cache.len()
}

#[read_only(ttl = "1h")]
fn lookup(query: &str) -> usize {
    query.len()
}

fn main() {}
