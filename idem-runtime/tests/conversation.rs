//! Durable turns: a conversation's model steps are recorded, replayed to a restarted run, and
//! never mixed with another conversation's.

#[path = "fault_store/mod.rs"]
mod fault_store;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idem_tools_runtime::store::{MemoryStore, Store};
use idem_tools_runtime::{Error, Turn};
use serde::{Deserialize, Serialize};

/// What a scripted model answers: the text it was asked and how often it was asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Reply {
    text: String,
    tokens: u64,
}

/// A model that answers each prompt with a reworded reply (as a real one does when asked
/// again), counting its calls.
#[derive(Default)]
struct Model {
    calls: AtomicU32,
}

impl Model {
    async fn ask(&self, prompt: &str) -> Result<Reply, Error> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::task::yield_now().await;
        Ok(Reply {
            text: format!("reply #{n} to {prompt}"),
            tokens: 100,
        })
    }

    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

/// A model call during the provider's outage.
async fn outage() -> Result<Reply, Error> {
    Err(Error::Config("the API said 529".into()))
}

fn turn(store: &Arc<dyn Store>) -> Turn {
    Turn::new("conv-1/turn-1").with_store(Arc::clone(store))
}

/// A run of a three-step conversation, cut after `steps` steps; returns the replies it got.
async fn run(store: &Arc<dyn Store>, model: &Model, prompts: &[&str], steps: usize) -> Vec<Reply> {
    let chat = turn(store).conversation("assistant");
    let mut replies = Vec::new();
    for prompt in prompts.iter().take(steps) {
        replies.push(chat.step(*prompt, model.ask(prompt)).await.unwrap());
    }
    replies
}

#[tokio::test]
async fn a_restarted_run_replays_the_recorded_steps_and_goes_on_live() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let model = Model::default();
    let prompts = ["plan", "after the first tool", "after the second tool"];

    let first = run(&store, &model, &prompts, 2).await; // the process dies after step 1
    assert_eq!(model.calls(), 2);

    let restarted = run(&store, &model, &prompts, 3).await;
    assert_eq!(model.calls(), 3, "only the step not recorded was sent");
    assert_eq!(
        restarted[..2],
        first[..],
        "the recorded steps came back as they were"
    );
    assert_eq!(restarted[2].text, "reply #2 to after the second tool");

    let again = run(&store, &model, &prompts, 3).await;
    assert_eq!(model.calls(), 3, "a run of recorded steps sends nothing");
    assert_eq!(again, restarted);
}

#[tokio::test]
async fn a_request_that_differs_from_the_recorded_one_stops_the_run_before_sending() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let model = Model::default();
    run(&store, &model, &["plan", "after the first tool"], 2).await;

    let chat = turn(&store).conversation("assistant");
    chat.step("plan", model.ask("plan")).await.unwrap();
    let diverged = chat
        .step(
            "after another tool result",
            model.ask("after another tool result"),
        )
        .await;
    match diverged {
        Err(Error::ModelStepDiverged {
            conversation,
            step,
            turn,
        }) => {
            assert_eq!((conversation.as_str(), step), ("assistant", 1));
            assert_eq!(turn, "conv-1/turn-1");
        }
        other => panic!("expected a divergence, got {other:?}"),
    }
    assert_eq!(
        model.calls(),
        2,
        "nothing was sent for the replay or the divergence"
    );
}

#[tokio::test]
async fn a_failed_step_is_asked_again_as_the_same_step() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let model = Model::default();
    let chat = turn(&store).conversation("assistant");
    let failed = chat
        .step("plan", async {
            Err::<Reply, _>(Error::Config("the API said 503".into()))
        })
        .await;
    assert!(failed.is_err());
    assert_eq!(chat.steps().await, 0, "a failed step is not counted");
    let answered = chat.step("plan", model.ask("plan")).await.unwrap();
    assert_eq!(chat.steps().await, 1);

    // The restarted run replays step 0: the failure was not recorded, the answer was.
    let replayed = turn(&store)
        .conversation("assistant")
        .step("plan", model.ask("plan"))
        .await
        .unwrap();
    assert_eq!(replayed, answered);
    assert_eq!(model.calls(), 1);
}

/// A model that keeps failing is asked at most the turn's per-key budget of times by one run,
/// then the step is refused without asking; a run restarted after the outage asks again (a
/// model's failures are not counted in the store: asking changes nothing in the world).
#[tokio::test]
async fn a_failing_model_stops_its_run_and_a_restarted_run_asks_again() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let model = Model::default();
    let asked = AtomicU32::new(0);
    let fail = || {
        asked.fetch_add(1, Ordering::SeqCst);
        outage()
    };
    for _run in 0..3 {
        let chat = turn(&store).conversation("assistant");
        for _ in 0..3 {
            assert!(chat.step("plan", fail()).await.is_err());
        }
        let refused = chat.step("plan", fail()).await;
        assert!(
            matches!(
                refused,
                Err(Error::BudgetExhausted {
                    attempts: 3,
                    limit: 3,
                    ..
                })
            ),
            "{refused:?}"
        );
    }
    assert_eq!(asked.load(Ordering::SeqCst), 12, "the futures were made");
    // After the outage, a restarted run gets its answer.
    let chat = turn(&store).conversation("assistant");
    let answered = chat.step("plan", model.ask("plan")).await.unwrap();
    assert_eq!(model.calls(), 1);
    // And a run's failures end with a success: the next failures count from 0.
    for _ in 0..2 {
        assert!(chat.step("next", fail()).await.is_err());
    }
    assert!(chat.step("next", model.ask("next")).await.is_ok());
    assert_ne!(answered.text, "");
}

/// An ask cut off by its caller (an agent loop's timeout around a slow model) is a failed ask:
/// the run asks for one step at most the per-key budget of times, then is refused, as for a
/// model that answers with errors. (A dropped step counted nothing: the model was asked
/// without bound.)
#[tokio::test]
async fn an_ask_cut_off_by_the_callers_timeout_counts_as_a_failed_ask() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let chat = turn(&store).conversation("assistant");
    let asked = AtomicU32::new(0);
    let slow = || async {
        asked.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok::<_, Error>(Reply {
            text: "late".to_owned(),
            tokens: 1,
        })
    };
    for _ in 0..3 {
        let cut = tokio::time::timeout(Duration::from_millis(5), chat.step("plan", slow())).await;
        assert!(cut.is_err(), "timed out");
    }
    let refused = tokio::time::timeout(Duration::from_secs(5), chat.step("plan", slow())).await;
    assert!(
        matches!(
            refused,
            Ok(Err(Error::BudgetExhausted {
                attempts: 3,
                limit: 3,
                ..
            }))
        ),
        "{refused:?}"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 3, "the model was asked");
    // A restarted run (a new `Turn`) asks again, and gets its answer.
    let model = Model::default();
    let restarted = turn(&store).conversation("assistant");
    assert!(restarted.step("plan", model.ask("plan")).await.is_ok());
}

/// A run whose asks of a step all failed still gets the step's answer once another run of the
/// turn recorded it: a recorded step replays whatever this run's failures say.
#[tokio::test]
async fn a_run_out_of_asks_replays_the_step_another_run_recorded() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let model = Model::default();
    let failing = turn(&store).conversation("assistant");
    for _ in 0..3 {
        assert!(failing.step("plan", outage()).await.is_err());
    }
    let healthy = turn(&store).conversation("assistant");
    let answered = healthy.step("plan", model.ask("plan")).await.unwrap();
    let replayed = failing.step("plan", model.ask("plan")).await.unwrap();
    assert_eq!(replayed, answered);
    assert_eq!(model.calls(), 1);
}

/// Refusals by the token cap are not failed asks: raising the cap lets the step through.
#[tokio::test]
async fn a_step_refused_by_the_token_cap_is_asked_once_the_cap_is_raised() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let model = Model::default();
    let tokens = |reply: &Reply| Some(reply.tokens);
    for _run in 0..4 {
        let chat = turn(&store).with_max_tokens(250).conversation("assistant");
        for prompt in ["one", "two", "three"] {
            chat.step_counting(prompt, tokens, model.ask(prompt))
                .await
                .unwrap();
        }
        let refused = chat.step_counting("four", tokens, model.ask("four")).await;
        assert!(
            matches!(refused, Err(Error::TokenBudgetExhausted { .. })),
            "{refused:?}"
        );
    }
    let chat = turn(&store)
        .with_max_tokens(10_000)
        .conversation("assistant");
    for prompt in ["one", "two", "three", "four"] {
        chat.step_counting(prompt, tokens, model.ask(prompt))
            .await
            .unwrap();
    }
    assert_eq!(
        model.calls(),
        4,
        "three recorded steps, then the fourth asked once"
    );
}

#[tokio::test]
async fn conversations_of_one_turn_have_steps_of_their_own() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let model = Model::default();
    let turn = turn(&store);
    let planner = turn.conversation("planner");
    let writer = turn.clone().conversation("writer");
    let plan = planner.step("plan", model.ask("plan")).await.unwrap();
    let draft = writer.step("draft", model.ask("draft")).await.unwrap();
    assert_ne!(plan, draft);
    // The same label on a clone of the turn is the same conversation: its next step is 1.
    assert_eq!(turn.clone().conversation("planner").steps().await, 1);
    assert_eq!(model.calls(), 2);
}

#[tokio::test]
async fn the_token_cap_stops_live_steps_and_holds_across_a_restart() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let model = Model::default();
    let capped = || turn(&store).with_max_tokens(250);
    let tokens = |reply: &Reply| Some(reply.tokens);

    let chat = capped().conversation("assistant");
    for prompt in ["one", "two", "three"] {
        chat.step_counting(prompt, tokens, model.ask(prompt))
            .await
            .unwrap();
    }
    assert_eq!(chat.turn().tokens_spent(), 300);
    let refused = chat.step_counting("four", tokens, model.ask("four")).await;
    assert!(
        matches!(
            refused,
            Err(Error::TokenBudgetExhausted {
                spent: 300,
                limit: 250,
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(model.calls(), 3, "the refused step was not sent");

    // A restarted run replays what was recorded, whatever the cap, and stops at the same step.
    let restarted = capped().conversation("assistant");
    for prompt in ["one", "two", "three"] {
        restarted
            .step_counting(prompt, tokens, model.ask(prompt))
            .await
            .unwrap();
    }
    let refused = restarted
        .step_counting("four", tokens, model.ask("four"))
        .await;
    assert!(matches!(refused, Err(Error::TokenBudgetExhausted { .. })));
    assert_eq!(model.calls(), 3);
}

#[tokio::test]
async fn a_step_cut_off_by_its_caller_is_asked_again_by_the_restarted_run() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let model = Model::default();
    let chat = turn(&store).conversation("assistant");
    let slow = async {
        tokio::time::sleep(Duration::from_secs(60)).await;
        model.ask("plan").await
    };
    let cut = tokio::time::timeout(Duration::from_millis(20), chat.step("plan", slow)).await;
    assert!(cut.is_err(), "the step was cut off");

    let reply = turn(&store)
        .conversation("assistant")
        .step("plan", model.ask("plan"))
        .await
        .expect("asked again, not refused as interrupted");
    assert_eq!(reply.text, "reply #0 to plan");
}

/// Asks `chat`'s step "plan" and cuts it off after `after`, which the model answers within,
/// so that its answer is being recorded (on a store slow to take it).
async fn cut_off_while_recorded(
    chat: &idem_tools_runtime::Conversation,
    model: &Model,
    after: Duration,
) {
    let cut = tokio::time::timeout(after, chat.step("plan", model.ask("plan"))).await;
    assert!(
        cut.is_err(),
        "cut off while its answer was recorded: {cut:?}"
    );
}

/// A step cut off by its caller while its answer is being recorded (the record goes on in the
/// background) and asked again by the same run waits for the record: it is not handed the
/// answer before the store has it. Here the process dies before the record lands; had the run
/// acted on the answer, the restarted run would ask the model again and act on another one
/// (a reworded tool call: a second action). Found by a review: the single-flight registry
/// handed the unrecorded answer to the second ask.
#[test]
fn an_answer_recorded_in_the_background_is_not_acted_on_before_it_lands() {
    use crate::fault_store::{Fault, FaultStore, Op};
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let model = Model::default();
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    // The first process: its store takes a record two seconds after it is sent.
    let slow: Arc<dyn Store> = Arc::new(FaultStore::new(Arc::clone(&memory), |op| match op {
        Op::Complete => Fault::Delay(Duration::from_secs(2)),
        _ => Fault::None,
    }));
    let asked_again = runtime().block_on(async {
        let chat = turn(&slow)
            .conversation("assistant")
            .with_lease(Duration::from_millis(500));
        cut_off_while_recorded(&chat, &model, Duration::from_millis(100)).await;
        tokio::time::timeout(
            Duration::from_millis(300),
            chat.step("plan", model.ask("plan")),
        )
        .await
        // The process dies here: its runtime, and the record on its way, are gone.
    });
    assert!(
        asked_again.is_err(),
        "the second ask waited for the record instead of taking the answer: {asked_again:?}"
    );
    assert_eq!(model.calls(), 1);
    let restarted = runtime().block_on(async {
        tokio::time::sleep(Duration::from_millis(600)).await; // the dead run's lease ends
        turn(&memory)
            .conversation("assistant")
            .step("plan", model.ask("plan"))
            .await
            .unwrap()
    });
    assert_eq!(
        restarted.text, "reply #1 to plan",
        "nobody acted on reply #0"
    );
}

/// Two runs of one turn at once: A's store records slowly and cannot renew (a partition), A's
/// step is cut off while its answer is recorded, and A asks it again. A's lease ends, B asks
/// the step and records its answer; A's background record then finds its lease gone. Both
/// runs act on the one recorded answer (A's second ask fails or replays it; before, A was
/// handed its unrecorded answer and acted on another answer than B and every restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_never_act_on_two_answers_of_a_step_recorded_in_the_background() {
    use crate::fault_store::{Fault, FaultStore, Op};
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let model = Model::default();
    let partitioned: Arc<dyn Store> =
        Arc::new(FaultStore::new(Arc::clone(&memory), |op| match op {
            Op::Complete => Fault::Delay(Duration::from_secs(1)),
            Op::Renew => Fault::FailBefore,
            _ => Fault::None,
        }));
    let lease = Duration::from_millis(300);
    let chat_a = turn(&partitioned)
        .conversation("assistant")
        .with_lease(lease);
    cut_off_while_recorded(&chat_a, &model, Duration::from_millis(50)).await;
    let a_acts_on = chat_a.step("plan", model.ask("plan")).await;

    tokio::time::sleep(Duration::from_millis(400)).await; // A's lease has ended
    let b_acts_on = turn(&memory)
        .conversation("assistant")
        .with_lease(lease)
        .step("plan", model.ask("plan"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await; // A's record has been tried
    let recorded = turn(&memory)
        .conversation("assistant")
        .step("plan", async {
            Ok::<_, Error>(Reply {
                text: "not asked".into(),
                tokens: 0,
            })
        })
        .await
        .unwrap();
    assert_eq!(b_acts_on, recorded);
    if let Ok(a_acts_on) = a_acts_on {
        assert_eq!(
            a_acts_on, recorded,
            "A acted on another answer than the turn's"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_of_one_turn_at_once_ask_the_model_once() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let model = Arc::new(Model::default());
    let runs = (0..2).map(|_| {
        let (store, model) = (Arc::clone(&store), Arc::clone(&model));
        tokio::spawn(async move {
            turn(&store)
                .conversation("assistant")
                .step("plan", async {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    model.ask("plan").await
                })
                .await
        })
    });
    let mut replies = Vec::new();
    for run in runs.collect::<Vec<_>>() {
        replies.push(run.await.unwrap().unwrap());
    }
    assert_eq!(replies[0], replies[1]);
    assert_eq!(model.calls(), 1);
}

/// A run that stops polling mid-step (as a killed process does: no drop, no renewal) holds the
/// step until its lease ends: a restarted run (another process: a store handle of its own)
/// waiting less than the default lease is told the step is in flight, and one waiting longer
/// than a short step lease asks the model then.
#[tokio::test]
async fn a_step_held_by_a_dead_run_is_free_when_its_lease_ends() {
    use crate::fault_store::{Fault, FaultStore};
    let shared = Arc::new(MemoryStore::new());
    let handle =
        || -> Arc<dyn Store> { Arc::new(FaultStore::new(shared.clone(), |_| Fault::None)) };
    let model = Model::default();
    let dead = |chat: idem_tools_runtime::Conversation| {
        // Polled until the model is being asked, then never again, and never dropped.
        let mut step = Box::pin(async move {
            chat.step("plan", std::future::pending::<Result<Reply, Error>>())
                .await
        });
        let polled = step
            .as_mut()
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
        assert!(polled.is_pending());
        std::mem::forget(step);
    };
    let restarted =
        |wait_ms: u64| turn(&handle()).with_in_flight_wait(Duration::from_millis(wait_ms));

    dead(turn(&handle()).conversation("assistant"));
    let held = restarted(300)
        .conversation("assistant")
        .step("plan", model.ask("plan"))
        .await;
    assert!(matches!(held, Err(Error::InFlight { .. })), "{held:?}");

    let short = |t: Turn| {
        t.conversation("short")
            .with_lease(Duration::from_millis(100))
    };
    dead(short(turn(&handle())));
    let reply = short(restarted(2_000))
        .step("plan", model.ask("plan"))
        .await
        .expect("the dead run's lease ended within the wait");
    assert_eq!(reply.text, "reply #0 to plan");
}

/// A step whose answer cannot be recorded fails (the model is asked again), rather than hand
/// the run an answer a restarted run would not see.
#[tokio::test]
async fn a_step_that_cannot_be_recorded_fails_and_is_asked_again() {
    use crate::fault_store::{Fault, FaultStore, Op};
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let store: Arc<dyn Store> = Arc::new(FaultStore::new(Arc::clone(&memory), {
        let failing = Arc::clone(&failing);
        move |op| match op {
            Op::Complete if failing.load(Ordering::SeqCst) => Fault::FailBefore,
            _ => Fault::None,
        }
    }));
    let model = Model::default();
    let chat = turn(&store).conversation("assistant");
    let failed = chat.step("plan", model.ask("plan")).await;
    assert!(matches!(failed, Err(Error::Store { .. })), "{failed:?}");
    assert_eq!(chat.steps().await, 0);
    failing.store(false, Ordering::SeqCst);
    let answered = chat.step("plan", model.ask("plan")).await.unwrap();
    assert_eq!(answered.text, "reply #1 to plan", "asked again");
    let replayed = turn(&store)
        .conversation("assistant")
        .step("plan", model.ask("plan"))
        .await
        .unwrap();
    assert_eq!(replayed, answered);
}

/// A step whose answer was recorded though the store's reply to the record was lost answers
/// it, once its claim is found no longer held and the record found: a restarted run replays
/// that answer, as this run acted on it. (It failed: the run went another way — a backup
/// conversation, say — and the restart took the recorded answer's way, two different
/// actions.)
#[tokio::test]
async fn a_step_whose_record_landed_though_its_reply_was_lost_answers_it() {
    use crate::fault_store::{Fault, FaultStore, Op};
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let lost = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let store: Arc<dyn Store> = Arc::new(FaultStore::new(Arc::clone(&memory), {
        let lost = Arc::clone(&lost);
        move |op| match op {
            Op::Complete if lost.swap(false, Ordering::SeqCst) => Fault::FailAfter,
            _ => Fault::None,
        }
    }));
    let model = Model::default();
    let chat = turn(&store).conversation("assistant");
    let answered = chat.step("plan", model.ask("plan")).await.unwrap();
    assert_eq!(answered.text, "reply #0 to plan", "the first ask's answer");
    let replayed = turn(&store)
        .conversation("assistant")
        .step("plan", model.ask("plan"))
        .await
        .unwrap();
    assert_eq!(
        replayed, answered,
        "the restart replays what this run acted on"
    );
}

/// A model response too large to record (over 64 MiB) fails its step with an error naming the
/// limit, and the step is asked again; a record that large in the store is a decode error
/// naming it too, never a panic.
#[tokio::test]
async fn an_oversized_response_fails_its_step_naming_the_limit() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let chat = turn(&store).conversation("assistant");
    let huge = "x".repeat(idem_tools_runtime::replay::MAX_RECORD + 1);
    let failed = chat.step("plan", async move { Ok::<_, Error>(huge) }).await;
    match failed {
        Err(Error::Encode { message, .. }) => {
            assert!(message.contains("64 MiB"), "{message}");
        }
        other => panic!(
            "expected an error naming the limit, got {:?}",
            other.map(|s| s.len())
        ),
    }
    assert_eq!(chat.steps().await, 0);
    let small = chat
        .step("plan", async { Ok::<_, Error>("a plan".to_owned()) })
        .await
        .unwrap();
    assert_eq!(small, "a plan");
}

#[tokio::test]
async fn model_steps_are_capped_by_the_turn_not_by_the_cap_of_actions() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let model = Model::default();
    // More steps than a tool may start actions (5) or the turn may start in all (2): model
    // steps are not actions.
    let chat = turn(&store).with_max_calls(2).conversation("assistant");
    let prompts: Vec<String> = (0..12).map(|n| format!("step {n}")).collect();
    for prompt in &prompts {
        chat.step(prompt, model.ask(prompt)).await.unwrap();
    }
    assert_eq!(model.calls(), 12);
}

#[tokio::test]
async fn a_turn_that_asks_its_model_past_its_cap_is_stopped_across_restarts() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let model = Model::default();
    let capped = || turn(&store).with_max_model_steps(3);
    let prompts = ["one", "two", "three", "four"];

    let chat = capped().conversation("assistant");
    for prompt in &prompts[..3] {
        chat.step(*prompt, model.ask(prompt)).await.unwrap();
    }
    // Another conversation of the same turn shares the cap.
    let other = capped().conversation("planner");
    let refused = other.step("plan", model.ask("plan")).await;
    assert!(
        matches!(
            refused,
            Err(Error::ModelStepsExhausted {
                steps: 3,
                limit: 3,
                ..
            })
        ),
        "{refused:?}"
    );
    let refused = chat.step("four", model.ask("four")).await;
    assert!(matches!(refused, Err(Error::ModelStepsExhausted { .. })));
    assert_eq!(model.calls(), 3, "no refused step was sent");

    // A restarted run replays the three recorded steps and is refused at the same place.
    let restarted = capped().conversation("assistant");
    for prompt in &prompts[..3] {
        restarted.step(*prompt, model.ask(prompt)).await.unwrap();
    }
    let refused = restarted.step("four", model.ask("four")).await;
    assert!(matches!(refused, Err(Error::ModelStepsExhausted { .. })));
    assert_eq!(model.calls(), 3);

    // By default a turn may ask its model 50 times.
    let fresh = Turn::new("conv-1/turn-2")
        .with_store(Arc::clone(&store))
        .conversation("assistant");
    for n in 0..idem_tools_runtime::turn::DEFAULT_MODEL_STEPS {
        fresh.step(&n, model.ask("go on")).await.unwrap();
    }
    let refused = fresh.step(&"one more", model.ask("go on")).await;
    assert!(matches!(
        refused,
        Err(Error::ModelStepsExhausted { limit: 50, .. })
    ));
}

/// A model step whose answer the store refuses to record because the step's lease was lost
/// (another run may be asking it) fails, like a step that could not be recorded: this run does
/// not act on an answer a restarted run would not see.
#[tokio::test]
async fn a_step_whose_lease_was_lost_before_it_was_recorded_fails() {
    use fault_store::{Fault, FaultStore, Op};
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let store: Arc<dyn Store> = Arc::new(FaultStore::new(Arc::clone(&memory), |op| match op {
        Op::Complete => Fault::LoseLease,
        _ => Fault::None,
    }));
    let model = Model::default();
    let chat = turn(&store).conversation("assistant");
    let answer = chat.step("plan", model.ask("plan")).await;
    assert!(matches!(answer, Err(Error::LeaseLost { .. })), "{answer:?}");
    assert_eq!(model.calls(), 1);
}

/// Records the messages of the warnings of target `idem`.
#[derive(Clone, Default)]
struct Warnings(Arc<std::sync::Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let meta = event.metadata();
        if *meta.level() == tracing::Level::WARN && meta.target() == "idem" {
            let mut message = Message(String::new());
            event.record(&mut message);
            self.0.lock().unwrap().push(message.0);
        }
    }
}

/// An agent loop restarted from the top with the `Turn` value of the run before (not a new
/// one, as the README says) goes on after that run's last step and asks the model again: the
/// step asked with step 0's request is logged as such, once the model answered; a new `Turn`
/// replays, and a loop that goes on normally is not warned about.
#[tokio::test]
async fn a_run_restarted_with_the_same_turn_value_is_warned_about() {
    use tracing_subscriber::layer::SubscriberExt;
    let warnings = Warnings::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(warnings.clone()));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let model = Model::default();
    let agent_loop = async |turn: &Turn| {
        let chat = turn.conversation("assistant");
        let plan = chat.step("plan", model.ask("plan")).await.unwrap();
        chat.step(&format!("act on {}", plan.text), model.ask("act"))
            .await
            .unwrap();
    };
    let reused = turn(&store);
    agent_loop(&reused).await;
    agent_loop(&turn(&store)).await; // a new `Turn`: replays
    assert_eq!(model.calls(), 2);
    assert!(warnings.0.lock().unwrap().is_empty());
    agent_loop(&reused).await; // the same value: asks again, step 2 with step 0's request
    assert_eq!(model.calls(), 4);
    let warned = warnings.0.lock().unwrap().clone();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains("new `Turn`"), "{warned:?}");
}

/// Recorded steps are kept a day by default; a conversation that keeps them longer
/// (`with_ttl`, as long as the tools it calls keep theirs) replays them to a run restarted
/// after that day, instead of asking the model again (which rewords).
#[tokio::test]
async fn steps_are_kept_as_long_as_the_conversation_says() {
    use idem_tools_runtime::clock::ManualClock;
    let clock = ManualClock::new(1_700_000_000_000);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let model = Model::default();
    let week = Duration::from_secs(7 * 24 * 3600);
    let ask = |label: &'static str, ttl: Option<Duration>| {
        let chat = turn(&store).conversation(label);
        let chat = match ttl {
            Some(ttl) => chat.with_ttl(ttl),
            None => chat,
        };
        let model = &model;
        async move { chat.step("plan", model.ask("plan")).await.unwrap() }
    };
    let kept = ask("kept", Some(week)).await;
    let default = ask("default", None).await;
    clock.advance(Duration::from_secs(25 * 3600)); // the run is restarted a day later
    assert_eq!(ask("kept", Some(week)).await, kept, "replayed");
    assert_ne!(
        ask("default", None).await,
        default,
        "expired after a day: asked again"
    );
    assert_eq!(model.calls(), 3);
}

/// A model step's key is the one docs/key-spec.md §5 gives ("Model steps"): the pseudo-tool
/// `idem:model`, version 0, with the label and the step index as key arguments. Keys never
/// change silently: the first one is written out.
#[tokio::test]
async fn a_steps_key_is_the_specs() {
    use idem_tools_runtime::current_key;
    use idem_tools_runtime::key::ArgsDigest;
    let turn = Turn::new("tm-1")
        .with_namespace("ns")
        .with_store(Arc::new(MemoryStore::new()));
    let chat = turn.conversation("chat-é");
    let key = || async { Ok::<_, Error>(current_key().expect("in a step").to_hex()) };
    let first: String = chat.step("hello", key()).await.unwrap();
    let second: String = chat.step("again", key()).await.unwrap();
    assert_eq!(
        first,
        "f7607df484a7a5b4a546308715184b043fdf1f21815c61cbde85e771969736a8"
    );
    let mut args = ArgsDigest::new("idem:model");
    args.arg("conversation", "chat-é").unwrap();
    args.arg("step", &1_u32).unwrap();
    let (expected, _) = args.finish("ns", "tm-1", "idem:model", 0);
    assert_eq!(second, expected.to_hex());
}
