//! The browser client against a page of its own, served by axum on 127.0.0.1:0: a click must be
//! a real, trusted mouse click that reaches the server, typing and choosing must reach the page's
//! listeners, screenshots must be PNGs of the window, and the page's errors must be reported.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use axum::Json;
use axum::extract::{Query, State};
use axum::response::Html;
use axum::routing::get;
use serde_json::{Value, json};

use crate::browser::{Browser, WINDOW_SIZE};

/// Three controls above the fold; the button that counts is below it, so a click must scroll.
/// Its handler ignores untrusted clicks (`el.click()`, `dispatchEvent`), and the `covered`
/// button sits under a transparent overlay that a real click hits instead.
const PAGE: &str = r#"<!doctype html>
<html><head><meta charset="utf-8"><title>harness</title>
<style>
  body { font: 16px sans-serif; margin: 20px; }
  .stack { position: relative; display: inline-block; }
  #overlay { position: absolute; inset: 0; background: rgba(200, 0, 0, 0.2); }
  #below { margin-top: 1600px; }
</style></head>
<body>
  <p>Name <input id="name" value="old name">
     Colour <select id="colour"><option value="red">red</option><option value="green">green</option></select>
     <span class="stack"><button id="covered">covered</button><span id="overlay"></span></span>
     <button id="hidden" style="display: none">hidden</button></p>
  <p id="below"><button id="go">greet</button> <span id="answer"></span></p>
<script>
  window.seen = [];
  const field = document.getElementById("name"), colour = document.getElementById("colour");
  field.addEventListener("input", () => seen.push("input"));
  field.addEventListener("change", () => seen.push("change name"));
  colour.addEventListener("change", () => seen.push("change colour " + colour.value));
  document.getElementById("overlay").addEventListener("click", () => seen.push("overlay"));
  document.getElementById("covered").addEventListener("click", () => {
    seen.push("covered");
    fetch("/api/greet?name=covered&colour=none");
  });
  document.getElementById("go").addEventListener("click", async (event) => {
    if (!event.isTrusted) { seen.push("untrusted go"); return; }
    seen.push("go");
    const query = new URLSearchParams({ name: field.value, colour: colour.value });
    const reply = await fetch("/api/greet?" + query);
    document.getElementById("answer").textContent = (await reply.json()).greeting;
  });
</script></body></html>"#;

/// Reports three kinds of error, then marks itself done.
const THROWING_PAGE: &str = r#"<!doctype html>
<html><head><meta charset="utf-8"><title>throws</title></head>
<body><p>This page throws.</p>
<script>
  console.log("a log line is not an error");
  console.error("console says no", 42);
  Promise.reject(new Error("nobody caught this"));
  setTimeout(() => { throw new Error("boom after load"); }, 0);
  setTimeout(() => { document.body.dataset.done = "1"; }, 20);
</script></body></html>"#;

/// The pages and a JSON endpoint that records who asked, on its own runtime.
struct Server {
    /// Dropping it stops the server.
    _runtime: tokio::runtime::Runtime,
    address: SocketAddr,
    greeted: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start() -> Result<Server> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .context("building the server's runtime")?;
        let greeted = Arc::new(Mutex::new(Vec::new()));
        let app = axum::Router::new()
            .route("/", get(|| async { Html(PAGE) }))
            .route("/throws", get(|| async { Html(THROWING_PAGE) }))
            .route("/api/greet", get(greet))
            .with_state(greeted.clone());
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).context("binding")?;
        let address = listener.local_addr().context("the server's address")?;
        runtime.spawn(async move { axum::serve(listener, app).await });
        Ok(Server { _runtime: runtime, address, greeted })
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    fn greeted(&self) -> Vec<String> {
        self.greeted.lock().expect("no handler panics while holding it").clone()
    }
}

async fn greet(
    State(greeted): State<Arc<Mutex<Vec<String>>>>,
    Query(query): Query<HashMap<String, String>>,
) -> Json<Value> {
    let who = format!(
        "{} in {}",
        query.get("name").map_or("nobody", String::as_str),
        query.get("colour").map_or("grey", String::as_str)
    );
    greeted.lock().expect("no handler panics while holding it").push(who.clone());
    Json(json!({ "greeting": format!("hello, {who}") }))
}

#[test]
fn a_real_click_after_typing_and_choosing_fetches_and_the_page_is_screenshotted() -> Result<()> {
    let server = Server::start()?;
    let started = Instant::now();
    let mut browser = Browser::launch()?;
    let launched = started.elapsed();
    let mut page = browser.new_page()?;
    page.goto(&server.url("/"))?;
    eprintln!("chromium launch {launched:?}, new page and first load {:?}", started.elapsed() - launched);

    page.type_into("#name", "valkey")?;
    page.select("#colour", "green")?;
    assert_eq!(page.eval("field.value")?, "valkey", "typing replaces what the field held");

    // The overlay takes a real click on the covered button: its handler must not run.
    page.click("#covered")?;
    page.wait_for("seen.includes('overlay')", Duration::from_secs(5))?;

    page.click("#go")?;
    let answer = page.wait_for("document.getElementById('answer').textContent", Duration::from_secs(10))?;
    assert_eq!(answer, "hello, valkey in green");
    assert_eq!(server.greeted(), ["valkey in green"], "one request, from the real click on #go");
    assert_eq!(
        page.eval("seen")?,
        json!(["input", "change name", "change colour green", "overlay", "go"]),
        "typing fires input, leaving the field (for the select) change; the covered button never fired"
    );
    assert!(page.eval("window.scrollY")? != 0, "#go is below the fold: the click scrolled to it");
    assert_eq!(page.js_errors()?, Vec::<String>::new());

    let dir = tempfile::tempdir()?;
    let path = dir.path().join("page.png");
    page.screenshot(&path)?;
    let png = std::fs::read(&path)?;
    assert_eq!(png.get(..8), Some(&b"\x89PNG\r\n\x1a\n"[..]), "a PNG signature");
    assert_eq!(png.get(12..16), Some(&b"IHDR"[..]));
    let width = u32::from_be_bytes(png[16..20].try_into()?);
    let height = u32::from_be_bytes(png[20..24].try_into()?);
    assert_eq!((width, height), WINDOW_SIZE, "the screenshot is the window");
    Ok(())
}

#[test]
fn the_page_errors_and_the_harness_misuses_are_reported() -> Result<()> {
    let server = Server::start()?;
    let mut browser = Browser::launch()?;
    let mut page = browser.new_page()?;

    page.goto(&server.url("/throws"))?;
    page.wait_for("document.body.dataset.done", Duration::from_secs(5))?;
    let errors = page.js_errors()?;
    assert_eq!(errors.len(), 3, "{errors:#?}");
    for expected in ["console.error: console says no 42", "nobody caught this", "boom after load"] {
        assert!(errors.iter().any(|error| error.contains(expected)), "{expected:?} in {errors:#?}");
    }

    let error = page.eval("no_such_variable").expect_err("an exception");
    assert!(format!("{error:#}").contains("no_such_variable is not defined"), "{error:#}");
    let error = page.wait_for("document.body.dataset.never", Duration::from_millis(300)).expect_err("never true");
    assert!(format!("{error:#}").contains("This page throws."), "the page's text in {error:#}");

    page.goto(&server.url("/"))?;
    let error = page.click("#missing").expect_err("no such element");
    assert!(format!("{error:#}").contains("no element matches"), "{error:#}");
    let error = page.click("#hidden").expect_err("display: none");
    assert!(format!("{error:#}").contains("no size"), "{error:#}");
    let error = page.select("#name", "x").expect_err("not a select");
    assert!(format!("{error:#}").contains("not a <select>"), "{error:#}");
    let error = page.select("#colour", "blue").expect_err("no such option");
    assert!(format!("{error:#}").contains("they are: red, green"), "{error:#}");

    let closed = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let error = page.goto(&format!("http://{closed}/")).expect_err("nothing listens");
    assert!(format!("{error:#}").contains("ERR_CONNECTION_REFUSED"), "{error:#}");
    Ok(())
}
