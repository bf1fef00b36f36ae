use idem_tools::idempotent;

#[idempotent(skip(trace_id), ignore(trace_id, deadline))]
async fn send_message(to: String, trace_id: String) -> Result<(), idem_tools::Error> {
    let _ = (to, trace_id);
    Ok(())
}

fn main() {}
