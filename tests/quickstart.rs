//! `cargo run -p idem-quickstart` tells the README's story; this runs the same code and checks
//! the same claims, so the story cannot silently rot.

#[path = "../examples/quickstart/src/main.rs"]
mod quickstart;

#[tokio::test]
async fn the_quickstart_story_holds() {
    let summary = quickstart::run().await;
    quickstart::check(&summary);
}
