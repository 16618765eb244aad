//! A headless Chromium driven over WebDriver (`chromedriver`, Debian's `chromium-driver`):
//! a few JSON requests on plain HTTP, no client crate to build. A machine without the
//! browser skips the browser tests by name (TST-1); under `CI` they must run.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::http::request;

/// The browser and its driver, found on `PATH`.
pub(crate) struct Browser {
    chromium: PathBuf,
    driver: PathBuf,
}

fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).flat_map(|dir| names.iter().map(move |n| dir.join(n))).find(|p| p.is_file())
}

impl Browser {
    fn find() -> Option<Browser> {
        Some(Browser {
            chromium: on_path(&["chromium", "chromium-browser", "google-chrome"])?,
            driver: on_path(&["chromedriver"])?,
        })
    }
}

/// The browser, or `None` after reporting `test` skipped; panics under `CI`, where
/// `.ci/run` installs it.
pub(crate) fn browser_or_skip(test: &str) -> Option<Browser> {
    if let Some(browser) = Browser::find() {
        return Some(browser);
    }
    if std::env::var_os("CI").is_some() {
        panic!("{test}: chromium (or chromedriver) not installed, and CI is set: .ci/run installs them");
    }
    relayer_test_support::report_skip(test, "chromium not installed");
    None
}

/// A WebDriver session in a headless Chromium.
pub(crate) struct Session {
    driver: Child,
    address: String,
    id: String,
}

/// The key WebDriver names an element by.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

impl Session {
    /// Starts the driver on a free port and opens a headless session.
    pub(crate) fn start(browser: &Browser) -> Session {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let driver = Command::new(&browser.driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", browser.driver.display()));
        let address = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(&address).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not answer on {address}");
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut session = Session { driver, address, id: String::new() };
        let capabilities = json!({"capabilities": {"alwaysMatch": {"goog:chromeOptions": {
            "binary": browser.chromium.to_string_lossy(),
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--no-first-run", "--window-size=1280,900"],
        }}}});
        let created = session.call("POST", "/session", Some(capabilities));
        session.id =
            created["sessionId"].as_str().unwrap_or_else(|| panic!("no session: {created}")).to_owned();
        session
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let text = body.map(|b| b.to_string());
        let response =
            request(&self.address, method, path, &[], text.as_deref().map(|t| ("application/json", t)));
        let value: Value = serde_json::from_str(&response.body)
            .unwrap_or_else(|e| panic!("WebDriver {method} {path}: not JSON ({e}): {}", response.body));
        assert!(
            response.status == 200,
            "WebDriver {method} {path}: {} {}",
            response.status,
            value["value"]["message"]
        );
        value["value"].clone()
    }

    fn session(&self, path: &str) -> String {
        format!("/session/{}{path}", self.id)
    }

    /// Opens `url` and waits until it loaded.
    pub(crate) fn open(&self, url: &str) {
        self.call("POST", &self.session("/url"), Some(json!({"url": url})));
    }

    fn elements(&self, css: &str) -> Vec<String> {
        let found = self.call(
            "POST",
            &self.session("/elements"),
            Some(json!({"using": "css selector", "value": css})),
        );
        let found = found.as_array().unwrap_or_else(|| panic!("{css}: not a list of elements: {found}"));
        found
            .iter()
            .map(|e| e[ELEMENT].as_str().unwrap_or_else(|| panic!("{css}: not an element: {e}")).to_owned())
            .collect()
    }

    /// How many elements match `css`.
    pub(crate) fn count(&self, css: &str) -> usize {
        self.elements(css).len()
    }

    /// The visible text of the one element matching `css`.
    pub(crate) fn text(&self, css: &str) -> String {
        let found = self.elements(css);
        assert_eq!(found.len(), 1, "{css}: {} elements on {}", found.len(), self.url());
        self.call("GET", &self.session(&format!("/element/{}/text", found[0])), None)
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// The texts of every element matching `css`.
    pub(crate) fn texts(&self, css: &str) -> Vec<String> {
        self.elements(css)
            .iter()
            .map(|e| {
                self.call("GET", &self.session(&format!("/element/{e}/text")), None)
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    }

    /// An attribute of the one element matching `css`.
    pub(crate) fn attribute(&self, css: &str, name: &str) -> Option<String> {
        let found = self.elements(css);
        assert_eq!(found.len(), 1, "{css}: {} elements", found.len());
        self.call("GET", &self.session(&format!("/element/{}/attribute/{name}", found[0])), None)
            .as_str()
            .map(str::to_owned)
    }

    /// Clicks the one element matching `css` (a link or a submit button: the next page loads).
    pub(crate) fn click(&self, css: &str) {
        let found = self.elements(css);
        assert_eq!(found.len(), 1, "{css}: {} elements on {}", found.len(), self.url());
        self.call("POST", &self.session(&format!("/element/{}/click", found[0])), Some(json!({})));
    }

    /// Waits until an element matches `css` (after a click that loads the next page).
    pub(crate) fn wait_for(&self, css: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.count(css) == 0 {
            assert!(Instant::now() < deadline, "{css} never appeared on {}: {}", self.url(), self.source());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The page's URL.
    pub(crate) fn url(&self) -> String {
        self.call("GET", &self.session("/url"), None).as_str().unwrap_or_default().to_owned()
    }

    /// The page's HTML as the browser holds it.
    pub(crate) fn source(&self) -> String {
        self.call("GET", &self.session("/source"), None).as_str().unwrap_or_default().to_owned()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if !self.id.is_empty() {
            let _ = request(&self.address, "DELETE", &self.session(""), &[], None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
