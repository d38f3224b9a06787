//! `toolhost ui [--open]`: a link to the operator's page with a one-time login code (the
//! TCP token never goes into a URL), printed and, with `--open`, opened in the browser.

use std::process::ExitCode;

use super::render::{emit, say, say_err};
use super::Globals;
use crate::client::ClientError;
use crate::protocol::{method, EmptyParams, UiLoginResult};

pub async fn run(g: &Globals, open: bool) -> Result<ExitCode, ClientError> {
    let login: UiLoginResult = g
        .connect()
        .await?
        .call(method::UI_LOGIN, &EmptyParams {})
        .await?;
    if g.out.json {
        emit(g.out, &login);
        return Ok(ExitCode::SUCCESS);
    }
    let Some(url) = &login.url else {
        say_err!(
            "toolhost: the daemon does not listen on TCP, which a browser needs: set listen.tcp (e.g. \"127.0.0.1:8765\") and a token, or forward a local port to the socket"
        );
        return Ok(ExitCode::from(1));
    };
    say!("The operator's page (the link works once, for two minutes):\n\n  {url}\n");
    if open {
        super::login::open_browser(url);
    }
    Ok(ExitCode::SUCCESS)
}
