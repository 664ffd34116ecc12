//! The web console against a running system (`up`: testbed, agents, ops server, master), in a
//! real headless Chromium: every page shows the live data, an operator approves a dry-run split
//! by clicking and it reaches the ops server, a viewer's click is refused in words, a manual
//! move from the form is executed and evaluated, bad form input is refused next to its field
//! with nothing submitted, and the page says when the master is gone and recovers when it is
//! back. `LB_CONSOLE_SCREENSHOTS=docs/console` (from the repository root) refreshes the
//! committed screenshots; otherwise they go to a temporary directory.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use lb_common::clients::{MasterClient, OpsClient};
use lb_common::config::shared::HttpClientConfig;
use lb_common::ids::Key;
use lb_common::protocol::{ActionEntry, ActionOutcome, Evaluation, Health, RecordsQuery, StoredRecord};
use lb_launcher::tokens::{DemoToken, DemoTokens};
use lb_launcher::up::{Overrides, UpOptions, up_with};
use serde_json::Value;

use crate::browser::{Browser, Page};

const SRE_TOKEN: &str = "console-operator-token-0001";
const VIEWER_TOKEN: &str = "console-viewer-token-00001";

/// Four workers, a key range at ~3x its partition's limit from 3 s.
const SCENARIO: &str = include_str!("../../../configs/scenarios/e2e-hot-range.toml");
const HOT_START: u64 = 0x4000_0000_0000_0000;
const HOT_END: u64 = 0x43ff_ffff_ffff_ffff;

/// Splits wait for an operator; nothing else acts by itself; evaluation is quick.
fn master_overrides() -> String {
    "[analyzer]\nwindow_ms = 2000\n[evaluation]\nsettle_secs = 2\nwindow_secs = 3\n\
     [planner.partition_overload]\nmode = \"dry_run\"\n[planner.worker_overload]\nmode = \"off\"\n\
     [planner.imbalance]\nmode = \"off\"\n"
        .to_owned()
}

/// `lb up` runs with auth on: its people get known tokens, `sre` (operator) and `dash` (viewer).
fn people() -> DemoTokens {
    let person = |name: &str, token: &str| DemoToken { name: name.to_owned(), token: token.to_owned() };
    DemoTokens::with_people(person("sre", SRE_TOKEN), person("dash", VIEWER_TOKEN)).expect("tokens")
}

const WAIT: Duration = Duration::from_secs(30);

fn js_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string")
}

/// Through the token dialog, as a person would (opening it first unless it is open).
fn use_token(page: &mut Page<'_>, token: &str) {
    let open = page.eval("document.getElementById('token-dialog').open").expect("dialog state");
    if open != Value::Bool(true) {
        page.click("#signin").expect("open the token dialog");
    }
    page.wait_for("document.getElementById('token-dialog').open", WAIT).expect("the dialog opens");
    page.eval("document.getElementById('token-input').value = ''").expect("clear");
    page.type_into("#token-input", token).expect("type the token");
    page.click("#token-save").expect("save the token");
    page.wait_for("!document.getElementById('token-dialog').open", WAIT).expect("the dialog closes");
}

/// Opens a page and waits until it, not the page before (a hash change renders asynchronously),
/// is drawn.
fn show(page: &mut Page<'_>, base: &str, route: &str) {
    let before = page.eval("document.body?.dataset.render ?? ''").expect("the render before");
    page.goto(&format!("{base}/console/#/{route}")).expect("navigate");
    let drawn = format!("document.body.dataset.render !== {before} && document.body.dataset.ready === '1'");
    page.wait_for(&drawn, WAIT).unwrap_or_else(|e| panic!("{route} is drawn: {e:#}"));
    let leaked = page
        .eval("(document.getElementById('page').innerText.match(/\\b(null|undefined|NaN|\\[object Object\\])\\b/) || [''])[0]")
        .expect("read the page");
    assert_eq!(leaked, Value::from(""), "{route} shows a raw JavaScript value");
}

/// Where screenshots go; the temporary directory, when there is one, lives as long as this.
struct Shots(PathBuf, #[allow(dead_code)] Option<tempfile::TempDir>);

impl Shots {
    fn new() -> Self {
        match std::env::var_os("LB_CONSOLE_SCREENSHOTS") {
            Some(dir) => {
                let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(dir);
                std::fs::create_dir_all(&dir).expect("screenshot dir");
                Shots(dir, None)
            }
            None => {
                let tmp = tempfile::tempdir().expect("tmp");
                Shots(tmp.path().to_owned(), Some(tmp))
            }
        }
    }

    fn take(&self, page: &mut Page<'_>, name: &str) {
        page.screenshot(self.0.join(format!("{name}.png"))).expect("screenshot");
    }
}

#[test]
fn the_console_shows_the_loop_and_steers_it_in_a_real_browser() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    lb_common::telemetry::metrics_handle();
    let dir = tempfile::tempdir().expect("dir");
    let options = UpOptions::loopback(dir.path(), SCENARIO).expect("scenario");
    let overrides = Overrides { master: master_overrides(), tokens: Some(people()) };
    let running = rt.block_on(up_with(&options, &overrides)).expect("up");
    let addr = running.master.addr();
    let base = format!("http://{addr}");
    let http = HttpClientConfig::default();
    let sre = MasterClient::new(&base, &http).with_bearer_token(SRE_TOKEN);
    let ops = OpsClient::new(format!("http://{}", running.ops_server.addr()), &http).with_bearer_token(SRE_TOKEN);
    let started = Instant::now();
    let workers = loop {
        match rt.block_on(sre.topology()) {
            Ok(t) => break t.workers.len(),
            Err(e) if started.elapsed() > WAIT => panic!("no topology: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    let shots = Shots::new();

    let mut browser = Browser::launch().expect("chromium starts");
    let mut page = browser.new_page().expect("a page");

    // `/` leads to the console; the overview has one bar per worker.
    page.goto(&format!("{base}/")).expect("root");
    page.wait_for("location.pathname === '/console/'", WAIT).expect("/ redirects to /console/");
    show(&mut page, &base, "overview");
    let bars = page
        .wait_for(&format!("document.querySelectorAll('#worker-bars .bar').length === {workers} && {workers}"), WAIT);
    assert_eq!(bars.expect("worker bars"), Value::from(workers));
    page.wait_for("document.body.dataset.stream === 'up'", WAIT).expect("the live stream is up");

    // A viewer's click on approve is refused, in words; nothing reaches the ops server.
    show(&mut page, &base, "act");
    use_token(&mut page, VIEWER_TOKEN);
    let pending = page
        .wait_for("document.querySelector('#pending tr[data-proposal]')?.dataset.proposal", Duration::from_secs(60))
        .expect("a dry-run split waits for approval");
    let proposal = pending.as_str().expect("an id").to_owned();
    page.click(&format!("#pending tr[data-proposal={}] button.approve", js_str(&proposal))).expect("click approve");
    let refusal = page
        .wait_for("document.querySelector('#decisions [data-outcome=refused]')?.textContent", WAIT)
        .expect("the refusal is shown");
    let refusal = refusal.as_str().unwrap_or_default().to_owned();
    assert!(refusal.contains("dash (viewer) may not approve"), "{refusal}");
    let known =
        |id: &str| rt.block_on(ops.actions(None)).expect("ops actions").iter().any(|a| a.request.id.as_str() == id);
    assert!(!known(&proposal), "a refused approval submits nothing");

    // The operator approves a pending split by clicking; it reaches the ops server. (The
    // planner may re-propose with a new id while the list is read: click what is listed.)
    use_token(&mut page, SRE_TOKEN);
    // A click that does not register (the buttons stay enabled and no decision shows within
    // 5 s) is retried, and said so: a person clicks again too.
    let mut proposal = String::new();
    for attempt in 0.. {
        let id = page
            .wait_for(
                "document.querySelector('#pending tr[data-proposal] button.approve')?.closest('tr').dataset.proposal",
                WAIT,
            )
            .expect("a proposal is listed for the operator");
        proposal = id.as_str().expect("an id").to_owned();
        let button = format!("#pending tr[data-proposal={}] button.approve", js_str(&proposal));
        if let Err(e) = page.click(&button) {
            assert!(attempt < 5, "click approve: {e:#}");
            eprintln!("the row of {proposal} went away before the click: {e:#}");
            continue;
        }
        let decided = format!(
            "document.querySelector('#decisions [data-outcome=approved][data-proposal={p}]') || \
             document.querySelector('{button}')?.disabled",
            p = js_str(&proposal)
        );
        if page.wait_for(&decided, Duration::from_secs(5)).is_ok() {
            break;
        }
        assert!(attempt < 5, "six clicks on approve did nothing");
        let seen = page
            .eval("[document.getElementById('pending').dataset.draws, document.getElementById('pending').dataset.ids, document.activeElement?.id, document.getElementById('token-dialog').open]")
            .unwrap_or_default();
        eprintln!(
            "a click on approve of {proposal} did not register (list draws, ids, focus, dialog open: {seen}); clicking again"
        );
    }
    page.wait_for(
        &format!("document.querySelector('#decisions [data-outcome=approved][data-proposal={}]')", js_str(&proposal)),
        WAIT,
    )
    .expect("approved");
    assert!(known(&proposal), "the approved split is at the ops server");

    // Bad input from the form is refused next to its field, and nothing is submitted.
    let topology = rt.block_on(sre.topology()).expect("topology");
    let cold =
        topology.partitions.iter().find(|p| !p.range.contains(Key(HOT_START))).expect("a cold partition").clone();
    let owner = cold.owner.clone();
    let other = topology.workers.iter().find(|w| w.id != owner && w.health == Health::Healthy).expect("another worker");
    let before = rt.block_on(ops.actions(None)).expect("ops actions").len();
    let form = |page: &mut Page<'_>, kind: &str, fields: &[(&str, &str)]| {
        page.select("#manual-kind", kind).expect("kind");
        for (name, value) in fields {
            page.eval(&format!("document.getElementById('manual-{name}').value = ''")).expect("clear");
            page.type_into(&format!("#manual-{name}"), value).expect("type");
        }
        page.eval("document.getElementById('manual-reason').value = ''").expect("clear");
        page.type_into("#manual-reason", "console drill").expect("reason");
        page.click("#manual-preview").expect("preview");
    };
    let field_error = |page: &mut Page<'_>, field: &str| -> String {
        let js = format!("document.querySelector('#manual-form .field-error[data-for={field}]').textContent");
        let v = page.wait_for(&js, WAIT).unwrap_or_else(|e| panic!("an error next to {field}: {e:#}"));
        v.as_str().unwrap_or_default().to_owned()
    };
    let start = format!("{}", cold.range.start);
    form(&mut page, "split", &[("partition", cold.id.as_str()), ("split_key", &start)]);
    assert!(field_error(&mut page, "split_key").contains("not strictly inside"), "split at the range start");
    form(&mut page, "move", &[("partition", cold.id.as_str()), ("to_worker", "w-nope")]);
    assert!(field_error(&mut page, "to_worker").contains("no worker w-nope"), "unknown worker");
    form(&mut page, "move", &[("partition", cold.id.as_str()), ("to_worker", owner.as_str())]);
    assert!(field_error(&mut page, "to_worker").contains("already on"), "a move to the same worker");
    // A merge names where it lands (the form's optional field): a worker owning neither side is
    // refused next to it.
    let (left, right) = topology
        .partitions
        .iter()
        .filter(|p| !p.range.contains(Key(HOT_START)))
        .find_map(|p| {
            let next = topology.partitions.iter().find(|q| {
                (&q.tenant, &q.table) == (&p.tenant, &p.table) && p.range.end.0.checked_add(1) == Some(q.range.start.0)
            })?;
            Some((p, next))
        })
        .expect("two cold neighbours");
    let neither = topology.workers.iter().find(|w| w.id != left.owner && w.id != right.owner).expect("a third worker");
    form(
        &mut page,
        "merge",
        &[("left", left.id.as_str()), ("right", right.id.as_str()), ("to_worker", neither.id.as_str())],
    );
    assert!(field_error(&mut page, "to_worker").contains("owns neither"), "a merge onto a worker owning neither side");
    assert_eq!(rt.block_on(ops.actions(None)).expect("ops actions").len(), before, "nothing was submitted");

    // A manual move: previewed with the planner's prediction, submitted, executed, evaluated.
    form(&mut page, "move", &[("partition", cold.id.as_str()), ("to_worker", other.id.as_str())]);
    page.wait_for("document.getElementById('manual-prediction')", WAIT).expect("the predicted effect is shown");
    shots.take(&mut page, "act");
    page.click("#manual-submit").expect("submit");
    let manual = page
        .wait_for("document.getElementById('manual-result').dataset.state === 'submitted' && document.getElementById('manual-result').dataset.action", WAIT)
        .expect("submitted");
    let manual = manual.as_str().expect("an action id").to_owned();

    // Both actions end and are evaluated; the timeline shows the split with its verdict.
    let evaluation = |id: &str| {
        let started = Instant::now();
        loop {
            let evals: Vec<StoredRecord<Evaluation>> =
                rt.block_on(sre.records(&RecordsQuery::default())).expect("evaluations");
            if let Some(e) = evals.into_iter().find(|e| e.key == id) {
                return e.body;
            }
            assert!(started.elapsed() < Duration::from_secs(90), "{id} is evaluated");
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    // Its verdict is the master's to give (a split approved at the very onset may peel too
    // little to count): the page must show exactly that verdict.
    let split = evaluation(&proposal);
    let moved = evaluation(&manual);
    let actions: Vec<StoredRecord<ActionEntry>> = rt.block_on(sre.records(&RecordsQuery::default())).expect("actions");
    let entry = actions.iter().find(|a| a.key == manual).expect("the manual action's record");
    assert_eq!(entry.body.outcome, ActionOutcome::Applied, "{entry:?}");
    assert_eq!(entry.body.request.origin, lb_common::protocol::Origin::Manual);
    assert_eq!(moved.action_id, manual);

    show(&mut page, &base, &format!("timeline?action={proposal}"));
    let verdict = page
        .wait_for(
            &format!("document.querySelector('.event[data-id={}] [data-verdict]')?.dataset.verdict", js_str(&proposal)),
            WAIT,
        )
        .expect("the split is on the timeline");
    assert_eq!(verdict, Value::from(split.judgement.verdict.as_str()), "{split:?}");
    page.wait_for(
        &format!("document.querySelector('.event[data-id={}] .before-after canvas')", js_str(&proposal)),
        WAIT,
    )
    .expect("its before/after chart is drawn");
    shots.take(&mut page, "timeline");
    show(&mut page, &base, "timeline");
    let kinds = page
        .wait_for("[...document.querySelectorAll('.event')].map(e => e.dataset.kind).join(',')", WAIT)
        .expect("events");
    assert!(kinds.as_str().is_some_and(|k| k.contains("split") && k.contains("move")), "{kinds}");

    // The heatmap: the hot range is the brightest band of the canvas; the split is marked.
    show(&mut page, &base, "heatmap?tenant=acme&table=orders&metric=ops&range=300");
    let band = page
        .eval(
            "(() => { const c = document.getElementById('heatmap-canvas'); const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; \
             let best = -1, row = -1; for (let y = 0; y < c.height; y++) { let s = 0; for (let x = 0; x < c.width; x++) { const o = (y * c.width + x) * 4; s += d[o] + d[o + 1] + d[o + 2]; } \
             if (s > best) { best = s; row = y; } } return [row, c.height]; })()",
        )
        .expect("read the canvas");
    let (row, height) = (band[0].as_u64().expect("row"), band[1].as_u64().expect("height"));
    // The keys of that row, from the reply the page drew (the master's heatmap, kept on the
    // canvas), in hex as the API writes them.
    let drawn = page
        .eval(&format!(
            "(() => {{ const h = document.getElementById('heatmap-canvas').lbHeatmap; \
             return [h.key_buckets[{row}].start, h.key_buckets[{row}].end, h.bucket_partitions[{row}], h.key_buckets.length]; }})()"
        ))
        .expect("the drawn heatmap");
    let hex = |i: usize| u64::from_str_radix(drawn[i].as_str().expect("a key"), 16).expect("hex");
    let (start, end) = (hex(0), hex(1));
    assert_eq!(drawn[3].as_u64(), Some(height), "one canvas row per key bucket");
    assert!(start <= HOT_END && end >= HOT_START, "the brightest band {start:016x}..{end:016x} is the hot range");
    page.wait_for("document.querySelector('#heatmap-markers .marker[data-kind=split]')", WAIT)
        .expect("the split is marked");
    // Hovering the band names the partition there now, its keys and the value (a mouse reports
    // whole pixels: the first pixel row inside the band's 1.2 px).
    let tip = page
        .eval(&format!(
            "(() => {{ const c = document.getElementById('heatmap-canvas'); const b = c.getBoundingClientRect(); \
             c.dispatchEvent(new MouseEvent('mousemove', {{ clientX: b.right - 2, clientY: Math.ceil(b.top + {row} * b.height / {height} + 0.01), bubbles: true }})); \
             return document.getElementById('heatmap-tip')?.textContent; }})()"
        ))
        .expect("hover");
    let tip = tip.as_str().unwrap_or_default().to_owned();
    let owner_now = drawn[2].as_str().expect("a live partition holds the band");
    assert!(tip.contains(&format!("partition {owner_now}")) && tip.contains(&format!("keys {start:016x}")), "{tip}");
    shots.take(&mut page, "heatmap");

    // The halt switch, clicked by the operator: the ops server halts, and resumes.
    show(&mut page, &base, "act");
    page.wait_for("document.getElementById('halt-toggle')", WAIT).expect("the halt switch");
    let text = page.eval("document.getElementById('halt').innerText").expect("the halt panel");
    assert!(text.as_str().is_some_and(|t| !t.contains("null") && t.contains("0 queued")), "{text}");
    page.type_into("#halt-reason", "console drill").expect("why");
    page.click("#halt-toggle").expect("halt");
    let state = page
        .wait_for("document.getElementById('halt-state')?.textContent.startsWith('Halted') && document.getElementById('halt-state').textContent", WAIT)
        .expect("shown halted");
    // (`up`'s ops server has no tokens, so it audits "anonymous"; the master's reason names the
    // operator.)
    assert!(state.as_str().is_some_and(|s| s.contains("console drill (by sre through the master)")), "{state}");
    let halt = rt.block_on(ops.halt_status()).expect("halt status");
    assert!(halt.halted && halt.reason.as_deref().is_some_and(|r| r.contains("by sre")), "{halt:?}");
    page.click("#halt-toggle").expect("resume");
    page.wait_for("document.getElementById('halt-state')?.textContent.startsWith('Running')", WAIT)
        .expect("shown running");
    assert!(!rt.block_on(ops.halt_status()).expect("halt status").halted, "resumed at the ops server");

    // Top-N opens a partition's history.
    show(&mut page, &base, "top?group_by=none");
    shots.take(&mut page, "top");
    page.click("#top-table tr[data-rank='1'] a").expect("open the hottest partition");
    page.wait_for("document.body.dataset.page === 'partition' && document.body.dataset.ready === '1' && document.querySelector('#partition-chart canvas')", WAIT)
        .expect("its history chart");
    shots.take(&mut page, "partition");

    // Policies: the live modes and the file they come from.
    show(&mut page, &base, "policies");
    let mode = page
        .wait_for(
            "document.querySelector('#policy-modes tr[data-policy=partition_overload] td:last-child')?.textContent",
            WAIT,
        )
        .expect("modes");
    assert_eq!(mode, Value::from("dry_run"));
    shots.take(&mut page, "policies");

    show(&mut page, &base, "overview");
    page.wait_for("document.querySelector('#spread-chart canvas')", WAIT).expect("the spread chart");
    shots.take(&mut page, "overview");

    // The master stops: the page says so; it comes back on the same address: the page follows.
    // What the page logged up to here is checked below; a request of its caught in flight by
    // the stop may be reset (or refused until the restart): that one is provoked too.
    let before_outage = page.js_errors().expect("errors").len();
    let lb_launcher::up::Running { testbed, ops_server, agents, master, master_config, .. } = running;
    assert!(rt.block_on(master.stop(Duration::from_secs(10))), "the master stops cleanly with a console attached");
    page.wait_for("document.body.dataset.stream === 'down' && !document.getElementById('banner').hidden", WAIT)
        .expect("a banner says the stream is lost");
    let banner = page.eval("document.getElementById('banner').textContent").expect("banner");
    assert!(banner.as_str().is_some_and(|b| b.contains("Lost the master")), "{banner}");
    shots.take(&mut page, "disconnected");
    let listener = rt.block_on(tokio::net::TcpListener::bind(addr)).expect("the same address again");
    let master = rt
        .block_on(lb_master::start(master_config.subscribe(), listener, Some(master_config.shared_status())))
        .expect("the master starts again");
    page.wait_for("document.body.dataset.stream === 'up' && document.getElementById('banner').hidden", WAIT)
        .expect("the page recovers");
    let after_outage = page.js_errors().expect("errors").len();

    // The refusals this test provoked show as failed requests; nothing else may.
    let errors = page.js_errors().expect("errors");
    let provoked =
        |e: &String| e.starts_with("network:") && (e.contains("status of 403") || e.contains("status of 422"));
    let outage = |e: &String| {
        e.starts_with("network:")
            && ["ERR_CONNECTION_RESET", "ERR_CONNECTION_REFUSED", "ERR_EMPTY_RESPONSE"].iter().any(|c| e.contains(c))
    };
    let unexpected: Vec<_> = errors
        .iter()
        .enumerate()
        .filter(|(i, e)| !(provoked(e) || (before_outage..after_outage).contains(i) && outage(e)))
        .map(|(_, e)| e)
        .collect();
    assert!(unexpected.is_empty(), "the console logged no error: {unexpected:?}");
    drop(page);
    drop(browser);
    rt.block_on(async {
        master.stop(Duration::from_secs(10)).await;
        testbed.stop(Duration::from_secs(10)).await;
        for (_, agent) in agents {
            agent.stop(Duration::from_secs(10)).await;
        }
        ops_server.stop(Duration::from_secs(10)).await;
    });
}
