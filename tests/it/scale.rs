//! Costs that must not grow with the database (issue 14): what `runs list --limit`
//! reads. The timings themselves are the bench's (`docs/bench.md`); these tests pin
//! the shapes that make them independent of size, which no machine load can blur.

use crate::common::Project;
use agentrun::model::{Message, Role};
use agentrun::store::{NewRun, RunId, RunStatus, Store};

fn runs(store: &Store, n: usize) -> Vec<RunId> {
    let opening = [Message::text(Role::User, "task")];
    (0..n)
        .map(|_| {
            let id = RunId::generate();
            store
                .create_run(&NewRun {
                    id: id.clone(),
                    task: "task",
                    task_path: "task.md",
                    snapshot: "{}",
                    max_steps: 1,
                    max_tokens: 1,
                    messages: &opening,
                    state: "{}",
                })
                .expect("create run");
            id
        })
        .collect()
}

#[test]
fn runs_list_with_a_limit_walks_the_index_in_order_and_stops() {
    let p = Project::new();
    let store = Store::open(&p.db(), true).unwrap();
    runs(&store, 3);
    let plan = store.recent_runs_plan().unwrap();
    assert!(
        plan.iter().any(|l| l.contains("runs_by_created")),
        "reads the created_at index: {plan:?}"
    );
    assert!(
        !plan.iter().any(|l| l.contains("TEMP B-TREE")),
        "no sort of the whole table before the limit: {plan:?}"
    );
}

#[test]
fn recent_runs_are_the_newest_first_up_to_the_limit() {
    let p = Project::new();
    let store = Store::open(&p.db(), true).unwrap();
    let ids = runs(&store, 5);
    let newest: Vec<RunId> = store
        .recent_runs(None, Some(2))
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(newest, vec![ids[4].clone(), ids[3].clone()]);
    assert_eq!(store.recent_runs(None, None).unwrap().len(), 5);
    assert_eq!(store.list_runs(None).unwrap().len(), 5);
    assert!(
        store
            .recent_runs(Some(RunStatus::Completed), Some(2))
            .unwrap()
            .is_empty()
    );
}
