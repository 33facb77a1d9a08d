//! A small HTTP/1.1 client over a std `TcpStream` (one keep-alive
//! connection, `Content-Length` and chunked bodies): what the server tests
//! and the load harness (`examples/serve_load.rs`) talk to `simhashdb serve`
//! with. Every read and write has a timeout.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// No single read or write waits longer than this.
pub const IO_TIMEOUT: Duration = Duration::from_secs(60);

/// A response: status code and body.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub content_type: String,
    pub body: Vec<u8>,
}

impl Reply {
    /// The body as JSON (panics with the body if it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {}: body is not JSON ({e}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One connection to the server.
pub struct Client {
    addr: SocketAddr,
    reader: BufReader<TcpStream>,
    /// The last response said `Connection: close`: the next request opens
    /// a new connection.
    closing: bool,
    token: Option<String>,
    head: String,
    line: String,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> io::Result<Client> {
        Ok(Client {
            addr,
            reader: BufReader::with_capacity(64 * 1024, Self::open(addr)?),
            closing: false,
            token: None,
            head: String::new(),
            line: String::new(),
        })
    }

    fn open(addr: SocketAddr) -> io::Result<TcpStream> {
        let stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    /// Replaces the connection with a new one.
    fn reconnect(&mut self) -> io::Result<()> {
        self.reader = BufReader::with_capacity(64 * 1024, Self::open(self.addr)?);
        self.closing = false;
        Ok(())
    }

    /// Sends `Authorization: Bearer TOKEN` with every request from now on.
    pub fn with_token(mut self, token: &str) -> Client {
        self.token = Some(token.to_string());
        self
    }

    /// The connection, to write raw bytes (a request sent in pieces).
    pub fn stream(&mut self) -> &mut TcpStream {
        self.reader.get_mut()
    }

    /// Writes the head of a request with a body of `len` bytes.
    pub fn send_head(
        &mut self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        len: usize,
    ) -> io::Result<()> {
        self.head.clear();
        self.head.push_str(method);
        self.head.push(' ');
        self.head.push_str(path);
        self.head.push_str(" HTTP/1.1\r\nHost: localhost\r\n");
        if let Some(ct) = content_type {
            self.head.push_str("Content-Type: ");
            self.head.push_str(ct);
            self.head.push_str("\r\n");
        }
        if let Some(token) = &self.token {
            self.head.push_str("Authorization: Bearer ");
            self.head.push_str(token);
            self.head.push_str("\r\n");
        }
        self.head.push_str("Content-Length: ");
        self.head.push_str(&len.to_string());
        self.head.push_str("\r\n\r\n");
        let stream = self.reader.get_mut();
        stream.write_all(self.head.as_bytes())
    }

    /// Sends a request and reads its response. If sending the body fails
    /// (the server answered early and closed), the response is still read.
    ///
    /// Like any HTTP client reusing a connection, it opens a new one when the
    /// last response said `Connection: close`, or when writing the head fails
    /// because the server had already closed this one (a server that answers
    /// before reading a request's body, a 401 for example, may close the
    /// connection afterwards): no byte of the request reached the server.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> io::Result<Reply> {
        if self.closing {
            self.reconnect()?;
        }
        if let Err(e) = self.send_head(method, path, content_type, body.len()) {
            if !matches!(
                e.kind(),
                io::ErrorKind::BrokenPipe
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
            ) {
                return Err(e);
            }
            self.reconnect()?;
            self.send_head(method, path, content_type, body.len())?;
        }
        let sent = self.reader.get_mut().write_all(body);
        match self.read_reply() {
            Ok(reply) => Ok(reply),
            Err(e) => sent.and(Err(e)),
        }
    }

    pub fn get(&mut self, path: &str) -> io::Result<Reply> {
        self.request("GET", path, None, b"")
    }

    pub fn delete(&mut self, path: &str) -> io::Result<Reply> {
        self.request("DELETE", path, None, b"")
    }

    /// POSTs `body` as `application/json`.
    pub fn post(&mut self, path: &str, body: &[u8]) -> io::Result<Reply> {
        self.request("POST", path, Some("application/json"), body)
    }

    /// Reads one response.
    pub fn read_reply(&mut self) -> io::Result<Reply> {
        let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
        self.line.clear();
        if self.reader.read_line(&mut self.line)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            ));
        }
        let status: u16 = self
            .line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad(format!("bad status line {:?}", self.line)))?;
        let mut length = None;
        let mut chunked = false;
        let mut content_type = String::new();
        loop {
            self.line.clear();
            if self.reader.read_line(&mut self.line)? == 0 {
                return Err(bad("the response ends in its head".into()));
            }
            let header = self.line.trim_end();
            if header.is_empty() {
                break;
            }
            let Some((name, value)) = header.split_once(':') else {
                return Err(bad(format!("bad header {header:?}")));
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = Some(
                    value
                        .parse::<usize>()
                        .map_err(|_| bad(format!("bad length {value:?}")))?,
                );
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.eq_ignore_ascii_case("chunked");
            } else if name.eq_ignore_ascii_case("content-type") {
                content_type = value.to_string();
            } else if name.eq_ignore_ascii_case("connection") {
                self.closing = value.eq_ignore_ascii_case("close");
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                self.line.clear();
                self.reader.read_line(&mut self.line)?;
                let size = usize::from_str_radix(self.line.trim(), 16)
                    .map_err(|_| bad(format!("bad chunk size {:?}", self.line)))?;
                if size == 0 {
                    self.line.clear();
                    self.reader.read_line(&mut self.line)?;
                    break;
                }
                let start = body.len();
                body.resize(start + size, 0);
                self.reader.read_exact(&mut body[start..])?;
                self.line.clear();
                self.reader.read_line(&mut self.line)?;
            }
        } else {
            body.resize(length.unwrap_or(0), 0);
            self.reader.read_exact(&mut body)?;
        }
        Ok(Reply {
            status,
            content_type,
            body,
        })
    }
}
