//! Just enough of the W3C WebDriver protocol to drive Debian's headless `chromium` through
//! `chromedriver`: open a page, type, click, run a script, take a screenshot.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

/// The key W3C WebDriver names an element reference by.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A chromedriver process and one browser session in it; both end when dropped.
pub struct Browser {
    driver: Child,
    base: String,
    client: reqwest::Client,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Where Debian installs them.
pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

impl Browser {
    /// Starts chromedriver and a headless browser with a screen of `width`×`height` CSS pixels.
    pub async fn start(width: u32, height: u32) -> Browser {
        let port = crate::support::free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let client = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while client.get(format!("{url}/status")).send().await.is_err() {
            assert!(tokio::time::Instant::now() < deadline, "chromedriver did not come up");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let args = [
            "--headless=new".to_owned(),
            // Root in CI: Chromium's sandbox needs user namespaces it may not get.
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
        ];
        // A window cannot be narrower than about 500 px; a phone's screen is emulated instead.
        let screen = json!({"deviceMetrics": {"width": width, "height": height, "pixelRatio": 2.0, "touch": true}});
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args, "mobileEmulation": screen},
        }}});
        let created: Value =
            client.post(format!("{url}/session")).json(&capabilities).send().await.unwrap().json().await.unwrap();
        let id = created["value"]["sessionId"].as_str().unwrap_or_else(|| panic!("no session: {created}"));
        Browser { base: format!("{url}/session/{id}"), driver, client }
    }

    async fn command(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer: Value = request.send().await.unwrap().json().await.unwrap();
        if answer["value"]["error"].is_string() {
            panic!("WebDriver {path}: {}", answer["value"]);
        }
        answer["value"].clone()
    }

    pub async fn open(&self, url: &str) {
        self.command(reqwest::Method::POST, "/url", Some(json!({"url": url}))).await;
    }

    async fn element(&self, css: &str) -> String {
        let found =
            self.command(reqwest::Method::POST, "/element", Some(json!({"using": "css selector", "value": css}))).await;
        found[ELEMENT].as_str().unwrap_or_else(|| panic!("no element {css}: {found}")).to_owned()
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        let element = self.element(css).await;
        self.command(reqwest::Method::POST, &format!("/element/{element}/value"), Some(json!({"text": text}))).await;
    }

    pub async fn click(&self, css: &str) {
        let element = self.element(css).await;
        self.command(reqwest::Method::POST, &format!("/element/{element}/click"), Some(json!({}))).await;
    }

    /// Runs `script` (a function body) in the page and returns what it returns.
    pub async fn run(&self, script: &str) -> Value {
        self.command(reqwest::Method::POST, "/execute/sync", Some(json!({"script": script, "args": []}))).await
    }

    /// Runs `script` until it returns something truthy, within `within`.
    pub async fn wait_for(&self, script: &str, within: Duration) -> Value {
        match self.try_wait_for(script, within).await {
            Some(value) => value,
            None => panic!("the page never got there: {script}"),
        }
    }

    /// [`Browser::wait_for`], `None` when the time ran out.
    pub async fn try_wait_for(&self, script: &str, within: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let value = self.run(script).await;
            if !matches!(value, Value::Null | Value::Bool(false)) && value != json!("") && value != json!([]) {
                return Some(value);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A PNG of the window.
    pub async fn screenshot(&self) -> Vec<u8> {
        let encoded = self.command(reqwest::Method::GET, "/screenshot", None).await;
        base64::engine::general_purpose::STANDARD.decode(encoded.as_str().unwrap()).unwrap()
    }
}
