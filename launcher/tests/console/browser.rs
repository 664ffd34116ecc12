//! A small Chrome DevTools Protocol (CDP) client for driving a real headless Chromium from
//! tests: launch Debian's `/usr/bin/chromium`, open a page, navigate, evaluate JavaScript, click
//! with the mouse, type, pick options, take screenshots, and collect the page's errors.
//!
//! Why not a crate: chromiumoxide is a huge generated CDP crate (minutes to compile on two
//! cores), fantoccini needs chromedriver and pulls a second HTTP/cookie stack. The few CDP
//! methods tests need are easy to send as JSON over `tungstenite`'s blocking websocket (plain
//! `ws://` to 127.0.0.1, no TLS, no async runtime).
//!
//! How it talks: Chromium starts with `--remote-debugging-port=0` and prints
//! `DevTools listening on ws://…` on stderr; we connect to that browser endpoint, create a target
//! (`Target.createTarget`) and attach to it with a flattened session, so every page command is
//! the browser connection's message with a `sessionId`. Calls are strictly one at a time: each
//! waits for its reply at most [`CALL_TIMEOUT`] and names its method when it fails; events that
//! arrive meanwhile are buffered (the load event `goto` waits for) or handled (console errors and
//! uncaught exceptions, kept for [`Page::js_errors`]), never dropped unread.
//!
//! A click is a real one: the element is scrolled into view and the mouse is pressed and
//! released at the centre of its box (`Input.dispatchMouseEvent`), so the page sees a trusted
//! event, and an element that is covered, disabled or off-screen does not get it — as for a user.

use std::collections::VecDeque;
use std::fs::File;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use base64::Engine as _;
use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

/// Where Debian's `chromium` package puts it; `CHROMIUM` overrides.
const DEFAULT_CHROMIUM: &str = "/usr/bin/chromium";
/// Each CDP call: a page whose script holds the renderer this long is itself the failure.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Spawn to `DevTools listening`: ~0.3 s on an idle machine, several seconds beside a build.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(30);
/// `goto` to the load event: pages under test come from 127.0.0.1.
const LOAD_TIMEOUT: Duration = Duration::from_secs(20);
/// After `Browser.close`, before the kill: a clean exit takes its helper processes with it.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(3);
/// `wait_for` re-evaluates this often: 20 round trips a second cost the renderer little.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Every page's viewport, and so every screenshot, in CSS pixels.
pub const WINDOW_SIZE: (u32, u32) = (1400, 900);

/// Headless, and nothing that reaches for the (closed) network or the user's desktop:
/// without the background-networking flags Chromium floods the machine with refused connections.
const FLAGS: &[&str] = &[
    "--headless=new",
    "--no-sandbox", // tests run as root, where the sandbox refuses to start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--mute-audio",
    "--remote-debugging-port=0",
];

/// A running Chromium and the DevTools connection to it. Dropping it closes Chromium (killing it
/// if it does not exit) and removes its profile directory.
#[derive(Debug)]
pub struct Browser {
    // Dropped in this order: the connection, then the process, then its directory.
    cdp: Cdp,
    process: Process,
}

#[derive(Debug)]
struct Process {
    child: Child,
    /// The profile (`profile/`) and Chromium's stderr (`stderr.log`).
    _dir: tempfile::TempDir,
}

/// One tab. It borrows the browser: tests drive one page at a time.
#[derive(Debug)]
pub struct Page<'b> {
    cdp: &'b mut Cdp,
    target: String,
    session: String,
    errors: Vec<String>,
}

#[derive(Debug)]
struct Cdp {
    ws: WebSocket<TcpStream>,
    next_id: u64,
    /// Events read while waiting for something else, oldest first.
    events: VecDeque<Event>,
    /// Chromium's stderr, quoted when the connection breaks (a crash says why there).
    log_path: PathBuf,
}

#[derive(Debug)]
struct Event {
    session: Option<String>,
    method: String,
    params: Value,
}

impl Browser {
    /// Starts Chromium (`CHROMIUM`, else `/usr/bin/chromium`, installed by
    /// `scripts/install-chromium.sh` when missing) and connects to it.
    pub fn launch() -> Result<Browser> {
        let binary = chromium()?;
        let dir = tempfile::Builder::new()
            .prefix("lb-chromium-")
            .tempdir()
            .context("creating chromium's profile directory")?;
        let log_path = dir.path().join("stderr.log");
        let log = File::create(&log_path).context("creating chromium's stderr log")?;
        let child = Command::new(&binary)
            .args(FLAGS)
            .arg(format!("--window-size={},{}", WINDOW_SIZE.0, WINDOW_SIZE.1))
            .arg(format!("--user-data-dir={}", dir.path().join("profile").display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        // From here on a failure drops `process`, which kills Chromium.
        let mut process = Process { child, _dir: dir };
        let url = process.devtools_url(&binary, &log_path)?;
        let cdp = Cdp::connect(&url, log_path)?;
        Ok(Browser { cdp, process })
    }

    /// Opens a new tab on `about:blank`.
    pub fn new_page(&mut self) -> Result<Page<'_>> {
        let created = self.cdp.call(None, "Target.createTarget", json!({"url": "about:blank"}), CALL_TIMEOUT)?;
        let target = created["targetId"].as_str().context("Target.createTarget: no targetId")?.to_owned();
        let attached =
            self.cdp.call(None, "Target.attachToTarget", json!({"targetId": target, "flatten": true}), CALL_TIMEOUT)?;
        let session = attached["sessionId"].as_str().context("Target.attachToTarget: no sessionId")?.to_owned();
        let mut page = Page { cdp: &mut self.cdp, target, session, errors: Vec::new() };
        for method in ["Page.enable", "Runtime.enable", "Log.enable"] {
            page.call(method, json!({}))?;
        }
        page.call("Page.setLifecycleEventsEnabled", json!({"enabled": true}))?;
        // The new headless mode keeps room for a window's toolbars (the viewport of a 1400x900
        // window is 1400x813 here): fix the viewport itself.
        let (width, height) = WINDOW_SIZE;
        let metrics = json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false});
        page.call("Emulation.setDeviceMetricsOverride", metrics)?;
        Ok(page)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Either reply or a closed connection means Chromium is on its way out.
        let _ = self.cdp.call(None, "Browser.close", json!({}), CLOSE_TIMEOUT);
        let deadline = Instant::now() + CLOSE_TIMEOUT;
        while Instant::now() < deadline && matches!(self.process.child.try_wait(), Ok(None)) {
            sleep(Duration::from_millis(20));
        }
    }
}

impl Process {
    /// Waits for the `DevTools listening on ws://…` line Chromium writes to stderr.
    fn devtools_url(&mut self, binary: &Path, log_path: &Path) -> Result<String> {
        let deadline = Instant::now() + LAUNCH_TIMEOUT;
        loop {
            let log = String::from_utf8_lossy(&std::fs::read(log_path).unwrap_or_default()).into_owned();
            if let Some(url) = log.lines().find_map(|line| line.strip_prefix("DevTools listening on ")) {
                return Ok(url.trim().to_owned());
            }
            if let Some(status) = self.child.try_wait().with_context(|| format!("waiting for {}", binary.display()))? {
                bail!(
                    "{} exited ({status}) before it listened for DevTools; its stderr:\n{}",
                    binary.display(),
                    stderr_tail(log_path)
                );
            }
            ensure!(
                Instant::now() < deadline,
                "{} did not listen for DevTools within {LAUNCH_TIMEOUT:?}; its stderr:\n{}",
                binary.display(),
                stderr_tail(log_path)
            );
            sleep(Duration::from_millis(25));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // Harmless when it has already exited; `wait` reaps it before the directory goes.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The binary to run, installing Debian's package (once per test binary) when it is missing.
fn chromium() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("CHROMIUM").filter(|path| !path.is_empty()) {
        let path = PathBuf::from(path);
        ensure!(path.is_file(), "CHROMIUM={} is not a file", path.display());
        return Ok(path);
    }
    let path = PathBuf::from(DEFAULT_CHROMIUM);
    if !path.is_file() {
        crate::install::run_once("install-chromium.sh")
            .map_err(|error| anyhow!("{DEFAULT_CHROMIUM} is missing and installing it failed: {error}"))?;
        ensure!(path.is_file(), "{DEFAULT_CHROMIUM} is still missing after scripts/install-chromium.sh");
    }
    Ok(path)
}

impl Cdp {
    fn connect(url: &str, log_path: PathBuf) -> Result<Cdp> {
        let address = url
            .strip_prefix("ws://")
            .and_then(|rest| rest.split('/').next())
            .with_context(|| format!("unexpected DevTools address {url}"))?;
        let stream = TcpStream::connect(address).with_context(|| format!("connecting to DevTools at {address}"))?;
        stream.set_nodelay(true).context("setting TCP_NODELAY")?;
        stream.set_read_timeout(Some(CALL_TIMEOUT)).context("setting a read timeout")?;
        stream.set_write_timeout(Some(CALL_TIMEOUT)).context("setting a write timeout")?;
        let (ws, _response) =
            tungstenite::client(url, stream).map_err(|error| anyhow!("websocket handshake with {url}: {error}"))?;
        Ok(Cdp { ws, next_id: 1, events: VecDeque::new(), log_path })
    }

    /// Sends one command and waits for its reply, buffering the events that come first.
    fn call(&mut self, session: Option<&str>, method: &str, params: Value, timeout: Duration) -> Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let mut request = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            request["sessionId"] = json!(session);
        }
        self.ws.send(Message::text(request.to_string())).with_context(|| format!("{method}: sending"))?;
        let deadline = Instant::now() + timeout;
        loop {
            let message = self.read(deadline).with_context(|| format!("{method}: no reply within {timeout:?}"))?;
            if message["id"].as_u64() != Some(id) {
                self.buffer(message);
                continue;
            }
            if let Some(error) = message.get("error") {
                bail!("{method}: {}", error["message"].as_str().unwrap_or("failed"));
            }
            return Ok(message.get("result").cloned().unwrap_or(Value::Null));
        }
    }

    /// Removes and returns the first event (buffered or still to come) that `wanted` accepts.
    fn wait_event(&mut self, what: &str, timeout: Duration, wanted: impl Fn(&Event) -> bool) -> Result<Event> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(index) = self.events.iter().position(&wanted) {
                return Ok(self.events.remove(index).expect("the position is in the buffer"));
            }
            let message = self.read(deadline).with_context(|| format!("waiting {timeout:?} for {what}"))?;
            self.buffer(message);
        }
    }

    /// The next message, a reply or an event.
    fn read(&mut self, deadline: Instant) -> Result<Value> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            ensure!(!left.is_zero(), "timed out");
            self.ws.get_mut().set_read_timeout(Some(left)).context("setting a read timeout")?;
            match self.ws.read() {
                Ok(Message::Text(text)) => {
                    return serde_json::from_str(&text).context("a DevTools message is not JSON");
                }
                // Pings are answered by tungstenite; CDP sends nothing else that matters.
                Ok(_) => {}
                Err(tungstenite::Error::Io(error))
                    if matches!(error.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(error) => {
                    bail!(
                        "the DevTools connection failed: {error}; chromium's stderr:\n{}",
                        stderr_tail(&self.log_path)
                    )
                }
            }
        }
    }

    /// Keeps an event for later; a reply to a call that already timed out is dropped.
    fn buffer(&mut self, message: Value) {
        if let Some(method) = message["method"].as_str() {
            let session = message["sessionId"].as_str().map(str::to_owned);
            let (method, params) = (method.to_owned(), message["params"].clone());
            self.events.push_back(Event { session, method, params });
        }
    }
}

impl Page<'_> {
    /// Navigates and waits for the new document's load event; a network failure
    /// (`net::ERR_CONNECTION_REFUSED`, …) is an error, an HTTP error status is not.
    pub fn goto(&mut self, url: &str) -> Result<()> {
        let session = Some(self.session.as_str());
        let navigated = self.cdp.call(session, "Page.navigate", json!({"url": url}), CALL_TIMEOUT)?;
        if let Some(error) = navigated["errorText"].as_str().filter(|error| !error.is_empty()) {
            bail!("Page.navigate {url}: {error}");
        }
        // A same-document navigation (`#fragment`) has no loader and no load event.
        if let Some(loader) = navigated["loaderId"].as_str() {
            let session = self.session.as_str();
            self.cdp.wait_event(&format!("the load event of {url}"), LOAD_TIMEOUT, |event| {
                event.session.as_deref() == Some(session)
                    && event.method == "Page.lifecycleEvent"
                    && event.params["name"] == "load"
                    && event.params["loaderId"] == loader
            })?;
        }
        self.collect_errors();
        Ok(())
    }

    /// Evaluates a JavaScript expression in the page, awaiting it if it is a promise, and
    /// returns its value as JSON (`undefined` is `null`; `NaN`, `Infinity`, `-0` and bigints
    /// come as strings). An exception is an error carrying its message.
    pub fn eval(&mut self, js: &str) -> Result<Value> {
        self.evaluate(js, CALL_TIMEOUT).map(|result| json_value(&result))
    }

    /// Re-evaluates `condition` until it is truthy and returns that value. On timeout the error
    /// shows the last value (or exception) and the start of the page's text.
    pub fn wait_for(&mut self, condition: &str, timeout: Duration) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            // Exceptions count as false: the element the condition reads may not exist yet.
            let last = match self.evaluate(condition, left.clamp(Duration::from_millis(500), CALL_TIMEOUT)) {
                Ok(result) if truthy(&result) => return Ok(json_value(&result)),
                Ok(result) => json_value(&result).to_string(),
                Err(error) => format!("{error:#}"),
            };
            if Instant::now() >= deadline {
                let text =
                    self.eval("document.body ? document.body.innerText.slice(0, 2000) : '(no body)'").map_or_else(
                        |error| format!("(unreadable: {error:#})"),
                        |text| text.as_str().unwrap_or("").to_owned(),
                    );
                bail!("wait_for {condition}: not true after {timeout:?}, last {last}; the page's text:\n{text}");
            }
            sleep(POLL_INTERVAL.min(left));
        }
    }

    /// Clicks the element `selector` matches with the left mouse button at the centre of its box,
    /// after scrolling it into view. Whatever is on top at that point gets the click.
    pub fn click(&mut self, selector: &str) -> Result<()> {
        let centre = self.with_element("click", selector, CENTRE_JS)?;
        for (kind, button, buttons, count) in
            [("mouseMoved", "none", 0, 0), ("mousePressed", "left", 1, 1), ("mouseReleased", "left", 0, 1)]
        {
            let (x, y) = (&centre["x"], &centre["y"]);
            let event =
                json!({"type": kind, "x": x, "y": y, "button": button, "buttons": buttons, "clickCount": count});
            self.call("Input.dispatchMouseEvent", event).with_context(|| format!("click {selector}"))?;
        }
        Ok(())
    }

    /// Focuses the field `selector` matches, selects what it holds and types `text` over it, as
    /// one insertion (the page gets `beforeinput` and `input`; `change` comes, as for a user,
    /// when the focus leaves, e.g. on the next click or `select`).
    pub fn type_into(&mut self, selector: &str, text: &str) -> Result<()> {
        self.with_element("type_into", selector, FOCUS_JS)?;
        let keys = if text.is_empty() {
            // Typing nothing over the selection: delete it, as Backspace would.
            let key = |kind| json!({"type": kind, "key": "Backspace", "code": "Backspace", "windowsVirtualKeyCode": 8});
            vec![("Input.dispatchKeyEvent", key("keyDown")), ("Input.dispatchKeyEvent", key("keyUp"))]
        } else {
            vec![("Input.insertText", json!({"text": text}))]
        };
        for (method, params) in keys {
            self.call(method, params).with_context(|| format!("type_into {selector}"))?;
        }
        Ok(())
    }

    /// Chooses the option with `value` in the `<select>` `selector` matches and fires `input`
    /// and `change` as a user's choice would. (The list a real click opens is not part of the
    /// page, so this sets the value, as Playwright's `selectOption` does.)
    pub fn select(&mut self, selector: &str, value: &str) -> Result<()> {
        let choose = format!("const value = {};{CHOOSE_JS}", js_string(value));
        self.with_element("select", selector, &choose).map(drop)
    }

    /// Writes a PNG of the viewport ([`WINDOW_SIZE`]) to `path`.
    pub fn screenshot(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let shot = self.call("Page.captureScreenshot", json!({"format": "png"}))?;
        let data = shot["data"].as_str().context("Page.captureScreenshot: no data")?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(data)
            .context("Page.captureScreenshot: the data is not base64")?;
        std::fs::write(path, png).with_context(|| format!("writing {}", path.display()))
    }

    /// Every `console.error`/`console.assert` failure, uncaught exception, unhandled rejection and
    /// error log entry (a failed resource, … but not the `/favicon.ico` Chromium asks for by itself)
    /// since the page was opened, across navigations.
    /// A round trip through the page first, so nothing it reported before this call is missed.
    pub fn js_errors(&mut self) -> Result<Vec<String>> {
        self.call("Runtime.evaluate", json!({"expression": "0"}))?;
        Ok(self.errors.clone())
    }

    /// Runs `body`, JavaScript that sees the element `selector` matches as `el`: a returned
    /// `{problem}` is an error of `action`, anything else the result.
    fn with_element(&mut self, action: &str, selector: &str, body: &str) -> Result<Value> {
        let missing = "{problem: 'no element matches'}";
        let js = format!(
            "(() => {{ const el = document.querySelector({}); if (!el) return {missing};\n{body}\n}})()",
            js_string(selector)
        );
        let result = self.eval(&js).with_context(|| format!("{action} {selector}"))?;
        if let Some(problem) = result["problem"].as_str() {
            bail!("{action} {selector}: {problem}");
        }
        Ok(result)
    }

    /// Evaluates `js` and returns CDP's `RemoteObject` for its value.
    fn evaluate(&mut self, js: &str, timeout: Duration) -> Result<Value> {
        let session = Some(self.session.as_str());
        let params = json!({"expression": js, "returnByValue": true, "awaitPromise": true});
        let evaluated = self.cdp.call(session, "Runtime.evaluate", params, timeout);
        self.collect_errors();
        let evaluated = evaluated?;
        if let Some(details) = evaluated.get("exceptionDetails") {
            let js: String = js.trim().chars().take(120).collect();
            bail!("Runtime.evaluate {js}: {}", exception_message(details));
        }
        Ok(evaluated["result"].clone())
    }

    fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        let reply = self.cdp.call(Some(&self.session), method, params, CALL_TIMEOUT);
        self.collect_errors();
        reply
    }

    /// Empties the event buffer, keeping this page's errors. (Only one page at a time reads it,
    /// since a page borrows the browser; a closed page's last events are dropped here.)
    fn collect_errors(&mut self) {
        for event in self.cdp.events.drain(..) {
            if event.session.as_deref() != Some(self.session.as_str()) {
                continue;
            }
            let params = &event.params;
            let error = match event.method.as_str() {
                "Runtime.consoleAPICalled" if matches!(params["type"].as_str(), Some("error" | "assert")) => {
                    let args = params["args"].as_array().map(Vec::as_slice).unwrap_or_default();
                    let texts: Vec<String> = args.iter().map(remote_text).collect();
                    format!("console.{}: {}", params["type"].as_str().unwrap_or("error"), texts.join(" "))
                }
                "Runtime.exceptionThrown" => exception_message(&params["exceptionDetails"]),
                // Chromium asks for /favicon.ico by itself, after the load event; its 404 is not
                // the page's error (and would arrive at random in the list).
                "Log.entryAdded"
                    if params["entry"]["level"] == "error"
                        && !params["entry"]["url"].as_str().is_some_and(|url| url.ends_with("/favicon.ico")) =>
                {
                    let entry = &params["entry"];
                    let (text, url) = (entry["text"].as_str().unwrap_or(""), entry["url"].as_str().unwrap_or(""));
                    format!("{}: {text} {url}", entry["source"].as_str().unwrap_or("log")).trim_end().to_owned()
                }
                _ => continue,
            };
            self.errors.push(error);
        }
    }
}

impl Drop for Page<'_> {
    fn drop(&mut self) {
        let _ = self.cdp.call(None, "Target.closeTarget", json!({"targetId": self.target}), CLOSE_TIMEOUT);
    }
}

/// `Uncaught Error: boom` (with the stack Chromium gives), from CDP's `ExceptionDetails`.
fn exception_message(details: &Value) -> String {
    let text = details["text"].as_str().unwrap_or("exception");
    let exception = &details["exception"];
    match exception["description"].as_str() {
        Some(description) => format!("{text} {description}"),
        None if !exception.is_null() => format!("{text} {}", remote_text(exception)),
        None => text.to_owned(),
    }
}

/// A console argument or thrown value as the DevTools console would print it, roughly.
fn remote_text(object: &Value) -> String {
    match (&object["value"], object["description"].as_str()) {
        (Value::String(text), _) => text.clone(),
        (Value::Null, Some(description)) => description.to_owned(),
        (value, _) => value.to_string(),
    }
}

// The element scripts of `click`, `type_into` and `select` (see `Page::with_element`).
const CENTRE_JS: &str = "
    el.scrollIntoView({block: 'center', inline: 'center', behavior: 'instant'});
    const box = el.getBoundingClientRect();
    if (!box.width || !box.height) return {problem: `it has no size (${box.width}x${box.height}): hidden?`};
    return {x: box.left + box.width / 2, y: box.top + box.height / 2};";
const FOCUS_JS: &str = "
    el.focus();
    if (document.activeElement !== el) return {problem: 'it does not take the focus (disabled?)'};
    if (typeof el.select === 'function') el.select(); else getSelection().selectAllChildren(el);
    return {};";
const CHOOSE_JS: &str = "
    if (el.tagName !== 'SELECT') return {problem: `it is a <${el.tagName.toLowerCase()}>, not a <select>`};
    if (el.disabled) return {problem: 'it is disabled'};
    const option = [...el.options].find(option => option.value === value);
    const values = [...el.options].map(option => option.value).join(', ');
    if (!option) return {problem: `no option has that value; they are: ${values}`};
    if (option.disabled) return {problem: 'that option is disabled'};
    el.focus();
    el.value = value;
    el.dispatchEvent(new Event('input', {bubbles: true}));
    el.dispatchEvent(new Event('change', {bubbles: true}));
    return {};";

/// A `RemoteObject` (evaluated with `returnByValue`) as JSON: `undefined` is `null`, and what
/// JSON cannot hold (`NaN`, `Infinity`, `-0`, bigints) its `unserializableValue` string.
fn json_value(result: &Value) -> Value {
    result.get("unserializableValue").or_else(|| result.get("value")).cloned().unwrap_or(Value::Null)
}

/// JavaScript's truthiness of a `RemoteObject`.
fn truthy(result: &Value) -> bool {
    if let Some(unserializable) = result["unserializableValue"].as_str() {
        return !matches!(unserializable, "NaN" | "-0" | "0n");
    }
    match &result["value"] {
        Value::Null => false, // also `undefined`, which has no value
        Value::Bool(flag) => *flag,
        Value::Number(number) => number.as_f64() != Some(0.0),
        Value::String(text) => !text.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// The last lines of Chromium's stderr, without the D-Bus complaints every start prints here
/// (there is no system bus in a container).
fn stderr_tail(log_path: &Path) -> String {
    let log = String::from_utf8_lossy(&std::fs::read(log_path).unwrap_or_default()).into_owned();
    let lines: Vec<&str> = log.lines().filter(|line| !line.contains(":ERROR:dbus/")).collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// `text` as a JavaScript string literal (JSON's is one).
fn js_string(text: &str) -> String {
    Value::from(text).to_string()
}
