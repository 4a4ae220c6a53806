//! Texts shared by the channels crate's micro-benchmarks: a model's answers as they reach the
//! bus and the Telegram renderer.

/// A typical answer: a paragraph with inline markup, a list, a code block and a link (~900
/// characters).
pub fn typical_answer() -> String {
    concat!(
        "Sure. The **short version**: the service fails because its config file is read from the ",
        "*working directory*, not from `/etc/app`. Systemd starts it in `/`, so `app.toml` is not ",
        "found & it falls back to the defaults (port 8080 < 1024 is fine, but the `db_url` is empty).\n\n",
        "To fix it, either:\n\n",
        "1. set `WorkingDirectory=/etc/app` in the unit, or\n",
        "2. pass the path explicitly with `--config /etc/app/app.toml`, or\n",
        "3. move the file to `~/.config/app/app.toml`, which it also checks.\n\n",
        "The second is the most robust. Your unit would then look like this:\n\n",
        "```ini\n",
        "[Service]\n",
        "ExecStart=/usr/local/bin/app --config /etc/app/app.toml\n",
        "Restart=on-failure\n",
        "User=app\n",
        "```\n\n",
        "Then run `systemctl daemon-reload && systemctl restart app` and check ",
        "`journalctl -u app -n 50`. See [the systemd docs](https://www.freedesktop.org/software/systemd/man/systemd.exec.html) ",
        "for the other options; _quotes_ like \"this\" are escaped too.\n",
    )
    .to_owned()
}

/// A long answer (~10,500 characters): sections with headings, lists, code, a quote and a
/// table, as a model writes when asked for a detailed explanation. Telegram needs three
/// messages for it.
pub fn long_answer() -> String {
    let mut text = String::from("# Migrating the deployment\n\nHere is the plan, step by step, with the commands.\n\n");
    for step in 1..=10 {
        text.push_str(&format!(
            "## Step {step}: {}\n\n\
             This step changes **{} components** and takes about {} minutes. Before you start, make sure \
             the *previous* step finished: `kubectl get pods -n prod` must show every pod `Running`, and \
             the dashboard at [grafana](https://grafana.example.com/d/abc?orgId=1&var-env=prod) must be green. \
             If anything looks off, stop here & ask — rolling back later is harder than waiting now.\n\n\
             - back up the database: `pg_dump -Fc prod > prod-{step}.dump`\n\
             - scale the workers down to {} replicas\n\
             - apply the manifests of this step (see below)\n\
             - [ ] check the error rate stays < 0.1 % for ten minutes\n\n\
             ```bash\n\
             #!/usr/bin/env bash\n\
             set -euo pipefail\n\
             for ns in prod staging; do\n\
             \x20   kubectl -n \"$ns\" apply -f manifests/step-{step}/\n\
             \x20   kubectl -n \"$ns\" rollout status deploy/api --timeout=300s\n\
             done\n\
             ```\n\n\
             > Note: the rollout waits for the readiness probe, which checks `/healthz` every 5 s; a pod \
             that fails it three times in a row is restarted.\n\n\
             | setting | before | after |\n\
             | --- | --- | --- |\n\
             | replicas | {} | {} |\n\
             | memory limit | 512Mi | 1Gi |\n\n",
            [
                "Prepare",
                "Database",
                "Queues",
                "Cache",
                "API",
                "Workers",
                "Cron jobs",
                "Ingress",
                "Monitoring",
                "Clean-up"
            ][step - 1],
            step + 2,
            step * 5,
            step % 3 + 1,
            step * 2,
            step * 3,
        ));
    }
    text.push_str("That's all — ping me if a step fails and paste the output of the failing command.\n");
    text
}
