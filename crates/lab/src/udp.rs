//! `rtloop lab udp-echo`: UDP round-trip time between a client and an echo server.
//!
//! The server echoes every datagram back to its sender ([`serve_echo`]). It runs either as a
//! thread of this process on loopback, or — with `--netns` — inside a network namespace this
//! process creates (`rtloop-lab-<pid>`), reached over a veth pair with addresses in
//! 10.200.x.0/30, as a child process `rtloop lab udp-echo-server …` started with
//! `ip netns exec`. A client thread, with the real-time settings applied and the background
//! load running, measures `samples` round trips (send, receive the echo, in ns) for every
//! message size × receive method: blocking `recv`, `epoll_wait` then `recv`, or a
//! non-blocking `recv` spun on (busy polling). The server's port is one the system picks
//! unless one is given (inside a fresh namespace every port is free, so a fixed one is used
//! there). Every run and the report's conditions say which path was measured: `network`
//! `loopback`, or `netns` (veth between two namespaces), labels ending in "netns".
//!
//! The echo server answers whoever writes to it, so [`serve_echo`] binds only loopback, or
//! any address when it runs inside one of the lab's own namespaces (`rtloop-lab-<pid>`,
//! recognised by comparing this process's network namespace with those under /run/netns), or
//! when explicitly allowed (`--allow-remote`).
//!
//! The namespaced server dies with the lab however the lab ends: it is started through
//! [`crate::child`] (the kernel kills it when the lab dies, a guard on every other path), and
//! it ends by itself when the process that started it is gone, after [`SERVER_IDLE_LIMIT`]
//! without a datagram, and at its `--seconds` deadline. A run killed with SIGKILL still leaves
//! its namespace and veth (nothing of ours runs then): the next `--netns` run removes every
//! `rtloop-lab-<pid>` namespace whose process is gone, with its veth and any process still in
//! it, and says so in its warnings.
//!
//! What it must never do: leave a namespace, veth or server behind (a guard removes them on
//! return, on error, on panic and after Ctrl-C; the next run removes those of a killed run),
//! send to any address but loopback or the namespace it created itself, serve beyond loopback
//! and its own namespaces unless told to, or hang when an echo is lost (every wait has a
//! timeout).

use crate::check::CheckError;
use crate::child::Tied;
use crate::options::{apply_rt, CommonOptions};
use crate::report::{Outcome, Run};
// Defined with the other methods, below the errors that name them; found here too.
pub use crate::methods::RecvMethod;
use crate::Error;
use rtloop_rt::periodic::now_ns;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long the client waits for one echo before calling it lost. Long enough for a loaded,
/// unprivileged machine; short enough that a dead server is reported, not waited on forever.
const ECHO_TIMEOUT: Duration = Duration::from_secs(1);

/// How often a waiting server looks at its stop flag and deadline.
const SERVER_POLL: Duration = Duration::from_millis(100);

/// The echo server process (`rtloop lab udp-echo-server`) ends after this long without a
/// datagram: the client sends without pause while it measures and gives up on a lost echo
/// after [`ECHO_TIMEOUT`], so a server idle this long serves nobody.
pub const SERVER_IDLE_LIMIT: Duration = Duration::from_secs(10);

/// How long to wait for a freshly started server to answer its first datagram.
const SERVER_READY_TIMEOUT: Duration = Duration::from_secs(5);

/// Round trips per size made before measuring, so first-time costs (ARP on the veth, cold
/// caches, page faults in the buffers) stay out of the samples.
const WARMUP_ROUND_TRIPS: usize = 20;

/// Port the echo server listens on inside a namespace when none was given: the namespace is
/// fresh and owned by us, so every port is free there.
const NETNS_DEFAULT_PORT: u16 = 40_000;

/// Busy-poll iterations between two clock reads (reading the clock on every spin would make the
/// loop measure the clock more than the socket).
const SPINS_PER_CLOCK_READ: u32 = 1024;

/// Set by the SIGINT/SIGTERM handler installed while a namespace exists, so that every wait
/// loop returns and the guard can remove the namespace before the process ends.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// What `udp_echo` measures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpEchoOptions {
    /// Payload sizes in bytes (1..=65507).
    pub sizes: Vec<usize>,
    /// Receive methods; each is used by both the client and the server.
    pub methods: Vec<RecvMethod>,
    /// Put the server in its own network namespace behind a veth pair (needs root).
    pub netns: bool,
    /// Server port; 0 picks a free one.
    pub port: u16,
}

impl Default for UdpEchoOptions {
    fn default() -> Self {
        UdpEchoOptions { sizes: vec![16, 64, 256, 1024], methods: vec![RecvMethod::Blocking], netns: false, port: 0 }
    }
}

/// Measure UDP round trips for every size × method. One [`Run`] per pair, labelled like
/// "udp-echo 64 B epoll".
pub fn udp_echo(common: &CommonOptions, opts: &UdpEchoOptions) -> Result<Outcome, Error> {
    validate(common, opts)?;
    let network = if opts.netns { "netns" } else { "loopback" };
    let mut outcome = Outcome {
        experiment: "udp-echo".to_string(),
        setup: vec![("network".to_string(), network.to_string())],
        ..Outcome::default()
    };
    // Loopback is what "udp-echo 64 B epoll" has always meant; a namespace run says so.
    let label_suffix = if opts.netns { ", netns" } else { "" };
    // The namespace (if any) is set up before the load starts, so `ip` commands are not slowed
    // down by it; it is dropped last, after the load stopped.
    let namespace = if opts.netns { Some(Namespace::create(&mut outcome.warnings)?) } else { None };
    let mut load = crate::load::Load::start(common.load)?;

    for &method in &opts.methods {
        let server = match &namespace {
            None => Server::start_thread(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), opts.port), method, common)?,
            Some(ns) => {
                let port = if opts.port == 0 { NETNS_DEFAULT_PORT } else { opts.port };
                let seconds = server_lifetime_seconds(common.samples, opts.sizes.len());
                ns.start_server(SocketAddr::new(ns.server_ip.into(), port), method, seconds, common, &mut outcome)?
            }
        };
        let local_ip = namespace.as_ref().map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |ns| ns.host_ip.into());
        let mut server = server;
        wait_until_serving(&mut server, local_ip)?;

        let client = ClientPlan {
            local_ip,
            server: server.addr,
            method,
            sizes: opts.sizes.clone(),
            samples: common.samples,
            common: common.clone(),
        };
        let measured = std::thread::Builder::new()
            .name(format!("udp-echo-{method}"))
            .spawn(move || client.run())
            .map_err(|e| Error::os("cannot start the client thread", e))?
            .join()
            .map_err(|_| Error::panicked("UDP echo client thread"))?;
        let (per_size, warnings) = measured?;
        for w in warnings {
            if !outcome.warnings.contains(&w) {
                outcome.warnings.push(w);
            }
        }
        for (size, samples_ns) in opts.sizes.iter().zip(per_size) {
            outcome.runs.push(Run {
                label: format!("udp-echo {size} B {method}{label_suffix}"),
                size: Some(*size),
                method: Some(method.to_string()),
                samples_ns,
            });
        }
        server.stop()?;
    }
    outcome.warnings.extend(load.stop());
    drop(namespace);
    if INTERRUPTED.load(Ordering::SeqCst) {
        return Err(Error::Interrupted);
    }
    Ok(outcome)
}

/// How long the echo server process lives at most.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerLifetime {
    /// It ends this long after it started, seconds (`--seconds`).
    pub seconds: f64,
    /// It ends after this long without a datagram, seconds (`--idle-seconds`; the lab's own
    /// server uses [`SERVER_IDLE_LIMIT`]).
    pub idle_seconds: f64,
    /// It also ends when this process is gone (`--parent-pid`; the lab gives its own, so a
    /// server that starts after the lab died ends at once). It always ends when the parent it
    /// started with is gone.
    pub parent_pid: Option<u32>,
}

/// Echo every datagram received on `bind` back to its sender, waiting with `method`, until
/// the `lifetime` is over or the process that started this one is gone (this process was given
/// to another parent). The server of `rtloop lab udp-echo-server`. It binds loopback, or any
/// address inside one of the lab's own network namespaces; anything else only with
/// `allow_remote`, because it answers whoever writes to it.
pub fn serve_echo(bind: &str, method: &str, lifetime: ServerLifetime, allow_remote: bool) -> Result<(), Error> {
    let addr: SocketAddr = bind.parse().map_err(|source| CheckError::BindAddress { bind: bind.to_string(), source })?;
    let method: RecvMethod =
        method.parse().map_err(|e| CheckError::InList { flag: "--method".into(), source: Box::new(e) })?;
    let seconds = crate::check::server_seconds("--seconds", lifetime.seconds)?;
    let idle_seconds = crate::check::server_seconds("--idle-seconds", lifetime.idle_seconds)?;
    if !allow_remote && !addr.ip().is_loopback() && !in_own_namespace() {
        return Err(CheckError::RemoteBind { addr }.into());
    }
    let socket = UdpSocket::bind(addr).map_err(|e| Error::os(format!("cannot bind the echo server to {addr}"), e))?;
    let lab = lifetime.parent_pid.map(|pid| crate::check::pid("--parent-pid", pid)).transpose()?;
    let until = ServeUntil {
        deadline_ns: now_ns().saturating_add((seconds * 1e9) as u64),
        idle_ns: (idle_seconds * 1e9) as u64,
        // SAFETY: getppid has no preconditions and cannot fail. Parent 1 (init) cannot go.
        parent: Some(unsafe { libc::getppid() }).filter(|&p| p != 1),
        lab,
    };
    if until.parent_gone() {
        // Started after its parent died (or for a parent it never had): nobody to serve.
        return Ok(());
    }
    serve_on(&socket, method, &until, &AtomicBool::new(false))
}

/// When a server loop ends, besides its stop flag and an interrupt.
struct ServeUntil {
    /// The monotonic time it ends, ns.
    deadline_ns: u64,
    /// It ends after this long without a datagram, ns (`u64::MAX`: never).
    idle_ns: u64,
    /// It ends when this process is no longer its parent (`None`: never).
    parent: Option<libc::pid_t>,
    /// It ends when this process is gone (`None`: never).
    lab: Option<libc::pid_t>,
}

impl ServeUntil {
    /// A server thread of this process: it ends with its stop flag only.
    const FOREVER: ServeUntil = ServeUntil { deadline_ns: u64::MAX, idle_ns: u64::MAX, parent: None, lab: None };

    /// The parent it started with, or the process it serves, is gone.
    fn parent_gone(&self) -> bool {
        // SAFETY: getppid has no preconditions and cannot fail.
        let orphaned = self.parent.is_some_and(|p| unsafe { libc::getppid() } != p);
        let lab_gone = self.lab.is_some_and(|pid| {
            // SAFETY: signal 0 only asks whether the process exists; nothing is sent.
            let rc = unsafe { libc::kill(pid, 0) };
            rc != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
        });
        orphaned || lab_gone
    }
}

/// True when this process runs in one of the lab's own network namespaces (`rtloop-lab-*`
/// under /run/netns, where `ip netns add` mounts them): its only interfaces are loopback and
/// the veth end the lab created.
fn in_own_namespace() -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(ours) = std::fs::metadata("/proc/self/ns/net") else { return false };
    let Ok(entries) = std::fs::read_dir("/run/netns") else { return false };
    entries.flatten().any(|e| {
        e.file_name().to_str().is_some_and(|n| n.starts_with(NAMESPACE_PREFIX))
            && std::fs::metadata(e.path()).is_ok_and(|m| m.dev() == ours.dev() && m.ino() == ours.ino())
    })
}

/// Names of the namespaces this module creates: `rtloop-lab-<pid>`.
const NAMESPACE_PREFIX: &str = "rtloop-lab-";

fn validate(common: &CommonOptions, opts: &UdpEchoOptions) -> Result<(), CheckError> {
    crate::check::samples("--samples", common.samples)?;
    crate::check::no_busy_wait(common.busy_wait_us, "udp-echo")?;
    crate::check::udp_sizes("--sizes", &opts.sizes)?;
    if opts.methods.is_empty() {
        return Err(CheckError::EmptyList {
            flag: "--methods".into(),
            give: "at least one of blocking, epoll, busy-poll".into(),
        });
    }
    crate::check::each_once("--methods", &opts.methods)?;
    crate::check::samples_in_all(common.samples, opts.sizes.len() * opts.methods.len(), "--sizes × --methods")
}

/// How long a namespaced server child lives at most: generous (5 ms per round trip plus
/// setup), because the guard kills it as soon as the client is done. The last of its bounds:
/// before it, the kernel kills it when this process dies, and it ends by itself when its
/// parent is gone or after [`SERVER_IDLE_LIMIT`] without a datagram.
fn server_lifetime_seconds(samples: usize, sizes: usize) -> f64 {
    (30.0 + samples.saturating_mul(sizes) as f64 * 0.005).min(crate::check::SERVER_MAX_SECONDS)
}

/// Waits for one datagram with a [`RecvMethod`], with a fixed timeout.
struct Receiver<'a> {
    socket: &'a UdpSocket,
    method: RecvMethod,
    epoll: Option<Epoll>,
    timeout: Duration,
}

impl<'a> Receiver<'a> {
    fn new(socket: &'a UdpSocket, method: RecvMethod, timeout: Duration) -> io::Result<Self> {
        let epoll = match method {
            RecvMethod::Blocking => {
                socket.set_nonblocking(false)?;
                // Set once here, not per receive, so the hot path is one syscall.
                socket.set_read_timeout(Some(timeout))?;
                None
            }
            RecvMethod::Epoll => {
                socket.set_nonblocking(true)?;
                Some(Epoll::watching(socket)?)
            }
            RecvMethod::BusyPoll => {
                socket.set_nonblocking(true)?;
                None
            }
        };
        Ok(Receiver { socket, method, epoll, timeout })
    }

    /// One datagram, or `None` when the timeout passed (or a signal interrupted the wait).
    fn recv_from(&self, buf: &mut [u8]) -> io::Result<Option<(usize, SocketAddr)>> {
        match self.method {
            RecvMethod::Blocking => nothing_on_timeout(self.socket.recv_from(buf)),
            RecvMethod::Epoll => {
                let epoll = self.epoll.as_ref().expect("epoll receivers always have an epoll instance");
                if !epoll.wait_readable(self.timeout)? {
                    return Ok(None);
                }
                // Readable can still yield EAGAIN (another reader, a dropped bad checksum).
                nothing_on_timeout(self.socket.recv_from(buf))
            }
            RecvMethod::BusyPoll => {
                let deadline_ns = now_ns().saturating_add(self.timeout.as_nanos() as u64);
                let mut spins = 0u32;
                loop {
                    match self.socket.recv_from(buf) {
                        Ok(got) => return Ok(Some(got)),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(None),
                        Err(e) => return Err(e),
                    }
                    spins += 1;
                    if spins == SPINS_PER_CLOCK_READ {
                        spins = 0;
                        if now_ns() >= deadline_ns || INTERRUPTED.load(Ordering::Relaxed) {
                            return Ok(None);
                        }
                    }
                    std::hint::spin_loop();
                }
            }
        }
    }
}

fn nothing_on_timeout<T>(result: io::Result<T>) -> io::Result<Option<T>> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(e)
            if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// An epoll instance watching one socket for input.
struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    fn watching(socket: &UdpSocket) -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes no pointers; it returns a new descriptor or -1.
        let raw = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` was just returned by epoll_create1, is open, and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut interest = libc::epoll_event { events: libc::EPOLLIN as u32, u64: 0 };
        // SAFETY: both descriptors are open for the whole call, and `interest` is a valid
        // epoll_event the kernel only reads.
        let rc = unsafe { libc::epoll_ctl(fd.as_raw_fd(), libc::EPOLL_CTL_ADD, socket.as_raw_fd(), &mut interest) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Epoll { fd })
    }

    /// True when the socket became readable within `timeout`.
    fn wait_readable(&self, timeout: Duration) -> io::Result<bool> {
        let mut ready = [libc::epoll_event { events: 0, u64: 0 }];
        let timeout_ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: `ready` is a writable array of exactly 1 epoll_event, matching maxevents = 1,
        // and the epoll descriptor is open (owned by self).
        let n = unsafe { libc::epoll_wait(self.fd.as_raw_fd(), ready.as_mut_ptr(), 1, timeout_ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted { Ok(false) } else { Err(e) };
        }
        Ok(n > 0)
    }
}

/// The server loop: echo until the stop flag, an interrupt, or what `until` says.
fn serve_on(socket: &UdpSocket, method: RecvMethod, until: &ServeUntil, stop: &AtomicBool) -> Result<(), Error> {
    let receiver = Receiver::new(socket, method, SERVER_POLL).map_err(|e| Error::os("echo server setup", e))?;
    let mut buf = vec![0u8; crate::check::MAX_UDP_PAYLOAD + 1];
    // Idleness and the parent are looked at only when a wait times out (every SERVER_POLL
    // without a datagram), so an echo never pays for them.
    let (mut served, mut served_before, mut active_ns) = (0u64, 0u64, now_ns());
    while !stop.load(Ordering::Relaxed) && !INTERRUPTED.load(Ordering::Relaxed) && now_ns() < until.deadline_ns {
        match receiver.recv_from(&mut buf) {
            Ok(Some((len, from))) => {
                // A send error (the client went away: ECONNREFUSED from an earlier ICMP) must
                // not end the server; the next datagram is answered normally.
                let _ = socket.send_to(&buf[..len], from);
                served += 1;
            }
            Ok(None) => {
                let now = now_ns();
                if served != served_before {
                    (served_before, active_ns) = (served, now);
                } else if now.saturating_sub(active_ns) >= until.idle_ns || until.parent_gone() {
                    break;
                }
            }
            // The ICMP "port unreachable" of an echo sent to a client that already closed
            // surfaces here on Linux; it is not a server failure.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
            Err(e) => return Err(Error::os("echo server receive failed", e)),
        }
    }
    Ok(())
}

/// A running echo server: a thread of this process or a child process in the namespace.
struct Server {
    addr: SocketAddr,
    kind: ServerKind,
}

enum ServerKind {
    Thread { stop: Arc<AtomicBool>, handle: Option<std::thread::JoinHandle<Result<(), Error>>> },
    Process(Tied),
}

impl Server {
    /// An echo server thread bound to `addr` (port 0: any free port), running with the
    /// policy and priority of `common.rt` so that load does not starve it more than the client.
    fn start_thread(addr: SocketAddr, method: RecvMethod, common: &CommonOptions) -> Result<Server, Error> {
        Server::start_thread_in(addr, method, common, None)
    }

    fn start_thread_in(
        addr: SocketAddr,
        method: RecvMethod,
        common: &CommonOptions,
        netns_path: Option<String>,
    ) -> Result<Server, Error> {
        let mut server_common = common.clone();
        // Not the client's CPUs: a spinning client and server pinned to one CPU at the same
        // FIFO priority would never let each other run. Memory locking is process wide and
        // already done (or refused) by the client.
        server_common.rt.cpus.clear();
        server_common.rt.mlock = false;
        server_common.rt.strict = false;
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<SocketAddr, Error>>();
        let thread_stop = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name(format!("udp-echo-server-{method}"))
            .spawn(move || {
                let bound = (|| -> Result<(UdpSocket, SocketAddr), Error> {
                    if let Some(path) = &netns_path {
                        enter_netns(path)?;
                    }
                    let socket = UdpSocket::bind(addr)
                        .map_err(|e| Error::os(format!("cannot bind the echo server to {addr}"), e))?;
                    let local = socket.local_addr()?;
                    // Refusals are reported by the client thread, which asks for the same.
                    let _ = apply_rt(&server_common);
                    Ok((socket, local))
                })();
                match bound {
                    Ok((socket, local)) => {
                        let _ = ready_tx.send(Ok(local));
                        serve_on(&socket, method, &ServeUntil::FOREVER, &thread_stop)
                    }
                    // The caller waits for this answer, and reports it.
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        Ok(())
                    }
                }
            })
            .map_err(|e| Error::os("cannot start the echo server thread", e))?;
        let addr = ready_rx.recv().map_err(|_| Error::EchoServerGone)??;
        Ok(Server { addr, kind: ServerKind::Thread { stop, handle: Some(handle) } })
    }

    /// An error when the server already died (so the client does not wait for it).
    fn check_alive(&mut self) -> Result<(), Error> {
        match &mut self.kind {
            ServerKind::Thread { handle, .. } => {
                if handle.as_ref().is_some_and(|h| h.is_finished()) {
                    let result = handle.take().map(|h| h.join());
                    return Err(match result {
                        Some(Ok(Err(e))) => e,
                        _ => Error::EchoServerEnded,
                    });
                }
                Ok(())
            }
            ServerKind::Process(child) => match child.try_wait() {
                Ok(Some(status)) => Err(Error::EchoServerExited { status }),
                _ => Ok(()),
            },
        }
    }

    fn stop(mut self) -> Result<(), Error> {
        match &mut self.kind {
            ServerKind::Thread { stop, handle } => {
                stop.store(true, Ordering::SeqCst);
                match handle.take().map(|h| h.join()) {
                    Some(Ok(result)) => result,
                    Some(Err(_)) => Err(Error::panicked("echo server thread")),
                    None => Ok(()),
                }
            }
            // Dropping the guard kills and reaps it.
            ServerKind::Process(_) => Ok(()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let ServerKind::Thread { stop, handle } = &mut self.kind {
            stop.store(true, Ordering::SeqCst);
            if let Some(h) = handle.take() {
                let _ = h.join();
            }
        }
    }
}

/// Send a probe until the server echoes it, so measurement starts only once it is serving.
fn wait_until_serving(server: &mut Server, local_ip: IpAddr) -> Result<(), Error> {
    check_target(server.addr.ip())?;
    let socket = UdpSocket::bind(SocketAddr::new(local_ip, 0)).map_err(|e| Error::os("probe socket", e))?;
    socket.connect(server.addr).map_err(|e| Error::os("probe socket", e))?;
    socket.set_read_timeout(Some(Duration::from_millis(50)))?;
    let probe = *b"rtloop-lab-probe";
    let mut buf = [0u8; 64];
    let give_up_ns = now_ns() + SERVER_READY_TIMEOUT.as_nanos() as u64;
    while now_ns() < give_up_ns {
        if INTERRUPTED.load(Ordering::SeqCst) {
            return Err(Error::Interrupted);
        }
        server.check_alive()?;
        // Before the server binds, the send may fail with ECONNREFUSED (an ICMP from the
        // previous probe); that only means "not yet".
        let _ = socket.send(&probe);
        if let Ok(n) = socket.recv(&mut buf) {
            if buf[..n] == probe {
                return Ok(());
            }
        }
    }
    Err(Error::EchoServerSilent { addr: server.addr, secs: SERVER_READY_TIMEOUT.as_secs() })
}

/// The only destinations this module sends to: loopback, or the 10.200.0.0/16 block its own
/// namespaces use. Anything else is a bug, refused before a datagram leaves.
fn check_target(ip: IpAddr) -> Result<(), Error> {
    let ours = match ip {
        IpAddr::V4(v4) => v4.is_loopback() || (v4.octets()[0] == 10 && v4.octets()[1] == 200),
        IpAddr::V6(v6) => v6.is_loopback(),
    };
    if ours {
        Ok(())
    } else {
        Err(Error::RefusedTarget { ip })
    }
}

/// What the client thread measures.
struct ClientPlan {
    local_ip: IpAddr,
    server: SocketAddr,
    method: RecvMethod,
    sizes: Vec<usize>,
    samples: usize,
    common: CommonOptions,
}

impl ClientPlan {
    /// Samples per size (in `sizes` order), and the real-time refusals.
    fn run(self) -> Result<(Vec<Vec<u64>>, Vec<String>), Error> {
        check_target(self.server.ip())?;
        let warnings = apply_rt(&self.common)?;
        let socket = UdpSocket::bind(SocketAddr::new(self.local_ip, 0)).map_err(|e| Error::os("client socket", e))?;
        // Connected: the kernel then only delivers datagrams from the server, and every send
        // goes to the one checked address.
        socket
            .connect(self.server)
            .map_err(|e| Error::os(format!("cannot connect the client to {}", self.server), e))?;
        let receiver = Receiver::new(&socket, self.method, ECHO_TIMEOUT).map_err(|e| Error::os("client setup", e))?;
        let max_size = self.sizes.iter().copied().max().unwrap_or(0);
        let mut message = vec![0u8; max_size];
        let mut echo = vec![0u8; max_size + 1];
        let total = (self.sizes.len() * self.samples) as u64;
        let bar = crate::options::progress_bar(&self.common, total, &format!("udp-echo {}", self.method));
        let mut sequence = 0u64;
        let mut per_size = Vec::with_capacity(self.sizes.len());
        for &size in &self.sizes {
            for (i, byte) in message[..size].iter_mut().enumerate() {
                *byte = i as u8;
            }
            for _ in 0..WARMUP_ROUND_TRIPS {
                sequence += 1;
                round_trip(&socket, &receiver, &mut message[..size], &mut echo, sequence)?;
            }
            let mut samples_ns = Vec::with_capacity(self.samples);
            for _ in 0..self.samples {
                if INTERRUPTED.load(Ordering::Relaxed) {
                    return Err(Error::Interrupted);
                }
                sequence += 1;
                samples_ns.push(round_trip(&socket, &receiver, &mut message[..size], &mut echo, sequence)?);
                if let Some(bar) = &bar {
                    bar.inc(1);
                }
            }
            per_size.push(samples_ns);
        }
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        Ok((per_size, warnings))
    }
}

/// One send → echo, in ns. The message carries a sequence number so a late echo of an earlier
/// message is never taken for this one's.
fn round_trip(
    socket: &UdpSocket,
    receiver: &Receiver<'_>,
    message: &mut [u8],
    echo: &mut [u8],
    sequence: u64,
) -> Result<u64, Error> {
    let tag = sequence.to_le_bytes();
    let tag_len = tag.len().min(message.len());
    message[..tag_len].copy_from_slice(&tag[..tag_len]);
    let start_ns = now_ns();
    socket.send(message).map_err(|e| Error::os(format!("send of {} B failed", message.len()), e))?;
    let give_up_ns = start_ns + ECHO_TIMEOUT.as_nanos() as u64;
    loop {
        match receiver.recv_from(echo) {
            Ok(Some((len, _))) if len == message.len() && echo[..tag_len] == message[..tag_len] => {
                return Ok(now_ns() - start_ns);
            }
            Ok(_) if INTERRUPTED.load(Ordering::Relaxed) => return Err(Error::Interrupted),
            // A stale echo, or a timeout/interrupt before the overall limit: keep waiting.
            Ok(_) => {}
            Err(e) => return Err(Error::os(format!("receive of the {} B echo failed", message.len()), e)),
        }
        if now_ns() >= give_up_ns {
            return Err(Error::NoUdpEcho { size: message.len(), secs: ECHO_TIMEOUT.as_secs() });
        }
    }
}

/// A network namespace with a veth pair to it, removed on drop.
struct Namespace {
    name: String,
    host_if: String,
    host_ip: Ipv4Addr,
    server_ip: Ipv4Addr,
    _signals: InterruptHandlers,
}

impl Namespace {
    /// Create this process's namespace and veth pair, after removing those of killed runs
    /// (one sentence per removal goes to `notes`).
    fn create(notes: &mut Vec<String>) -> Result<Namespace, Error> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err(Error::NetnsNeedsRoot);
        }
        if crate::child::tie(Command::new("ip").arg("-V").stdout(Stdio::null()).stderr(Stdio::null())).status().is_err()
        {
            return Err(Error::NoIpCommand);
        }
        notes.extend(remove_stale_namespaces());
        let pid = std::process::id();
        let subnet = free_subnet(pid)?;
        let signals = InterruptHandlers::install()?;
        let ns = Namespace {
            name: format!("{NAMESPACE_PREFIX}{pid}"),
            host_if: format!("rtlab{pid}h"),
            host_ip: Ipv4Addr::new(10, 200, subnet, 1),
            server_ip: Ipv4Addr::new(10, 200, subnet, 2),
            _signals: signals,
        };
        let peer_if = format!("rtlab{pid}n");
        // From here on, a failure drops `ns`, which removes whatever was created.
        ip(&["netns", "add", &ns.name])
            .map_err(|e| Error::CreateNamespace { name: ns.name.clone(), source: Box::new(e) })?;
        ip(&["link", "add", &ns.host_if, "type", "veth", "peer", "name", &peer_if])?;
        ip(&["link", "set", &peer_if, "netns", &ns.name])?;
        ip(&["addr", "add", &format!("{}/30", ns.host_ip), "dev", &ns.host_if])?;
        ip(&["link", "set", &ns.host_if, "up"])?;
        ip(&["-n", &ns.name, "addr", "add", &format!("{}/30", ns.server_ip), "dev", &peer_if])?;
        ip(&["-n", &ns.name, "link", "set", &peer_if, "up"])?;
        ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The echo server inside the namespace: a child process `rtloop lab udp-echo-server` when
    /// this executable is rtloop, else (a test harness, another embedding program) a thread
    /// that joins the namespace.
    fn start_server(
        &self,
        addr: SocketAddr,
        method: RecvMethod,
        seconds: f64,
        common: &CommonOptions,
        outcome: &mut Outcome,
    ) -> Result<Server, Error> {
        let exe = std::env::current_exe().map_err(|e| Error::os("cannot find this executable", e))?;
        let is_rtloop = exe.file_stem().is_some_and(|s| s == "rtloop");
        if !is_rtloop {
            let note =
                "note: the namespaced echo server ran as a thread of this process (this executable is not rtloop)"
                    .to_string();
            if !outcome.warnings.contains(&note) {
                outcome.warnings.push(note);
            }
            return Server::start_thread_in(addr, method, common, Some(format!("/run/netns/{}", self.name)));
        }
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name]);
        // Same policy and priority as the client, so the comparison is between methods, not
        // between a real-time client and a time-sharing server.
        let chrt_flag = match common.rt.policy {
            rtloop_rt::setup::Policy::Fifo => Some("-f"),
            rtloop_rt::setup::Policy::RoundRobin => Some("-r"),
            _ => None,
        };
        if let Some(flag) = chrt_flag {
            command.args(["chrt", flag, &common.rt.priority.to_string()]);
        }
        command.arg(&exe).args([
            "lab",
            "udp-echo-server",
            "--bind",
            &addr.to_string(),
            "--method",
            method.as_str(),
            "--seconds",
            &format!("{seconds:.0}"),
            // The server watches for this process to be gone, whatever happens to `ip`.
            "--parent-pid",
            &std::process::id().to_string(),
        ]);
        command.stdin(Stdio::null()).stdout(Stdio::null());
        // Started from the thread that runs the experiment and stops the server, so the
        // parent-death signal fires only when the lab itself ends.
        let child = Tied::spawn(&mut command)
            .map_err(|e| Error::os(format!("cannot start the echo server in {}", self.name), e))?;
        Ok(Server { addr, kind: ServerKind::Process(child) })
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        // Deleting one end of a veth pair deletes both; deleting the namespace would too, but
        // only once no process is left in it, so the link goes explicitly first.
        let _ = ip(&["link", "del", &self.host_if]);
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// Run `ip ARGS`, with its stderr in the error.
fn ip(args: &[&str]) -> Result<(), Error> {
    let out = crate::child::output(Command::new("ip").args(args).stdin(Stdio::null()))
        .map_err(|e| Error::os("cannot run ip", e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::IpFailed {
            args: args.iter().map(|a| a.to_string()).collect(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Remove the `rtloop-lab-<pid>` namespaces whose lab process is gone (killed with SIGKILL,
/// where no guard could run): first kill every process still inside (an echo server of an
/// older rtloop, which did not end by itself), because deleting a namespace only unmounts its
/// name and leaves the processes in it running; then delete the veth pair and the namespace.
/// Returns one sentence per namespace: what was removed, or what could not be.
fn remove_stale_namespaces() -> Vec<String> {
    let Ok(out) = crate::child::output(Command::new("ip").args(["netns", "list"])) else { return Vec::new() };
    let mut notes = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(pid) = name.strip_prefix(NAMESPACE_PREFIX).and_then(|p| p.parse::<u32>().ok()) else { continue };
        if pid == std::process::id() || std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let killed = kill_processes_in(name);
        let _ = ip(&["link", "del", &format!("rtlab{pid}h")]);
        let processes = match killed {
            0 => String::new(),
            n => format!(" and killed {} still in it", crate::wording::count(n as u64, "process", "processes")),
        };
        notes.push(match ip(&["netns", "del", name]) {
            Ok(()) => format!("removed network namespace {name} left by a killed lab run (pid {pid}){processes}"),
            Err(e) => format!("could not remove network namespace {name} left by a killed lab run: {e}"),
        });
    }
    notes
}

/// SIGKILL every process in the network namespace `name` and wait (up to a second) until
/// they are gone; returns how many there were.
fn kill_processes_in(name: &str) -> usize {
    let pids_in = || -> Vec<libc::pid_t> {
        crate::child::output(Command::new("ip").args(["netns", "pids", name]))
            .map(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().filter_map(|p| p.parse().ok()).collect())
            .unwrap_or_default()
    };
    let pids = pids_in();
    for &pid in &pids {
        // SAFETY: kill takes no pointers; the pid was listed in the namespace just now.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let give_up = std::time::Instant::now() + Duration::from_secs(1);
    while !pids.is_empty() && !pids_in().is_empty() && std::time::Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(20));
    }
    pids.len()
}

/// A third octet x such that 10.200.x.0/30 is not already configured on this host.
fn free_subnet(pid: u32) -> Result<u8, Error> {
    let out = crate::child::output(Command::new("ip").args(["-4", "-o", "addr", "show"]))
        .map_err(|e| Error::os("cannot run ip", e))?;
    let in_use = String::from_utf8_lossy(&out.stdout).into_owned();
    let first = (pid % 250) as u8 + 1;
    (0..250u32)
        .map(|i| ((first as u32 - 1 + i) % 250 + 1) as u8)
        .find(|x| !in_use.contains(&format!("10.200.{x}.")))
        .ok_or(Error::NoFreeSubnet)
}

/// Join the network namespace mounted at `path` (this thread only: network namespaces are per
/// thread).
fn enter_netns(path: &str) -> Result<(), Error> {
    let file = std::fs::File::open(path).map_err(|e| Error::os(format!("cannot open namespace {path}"), e))?;
    // SAFETY: the descriptor is open for the duration of the call; CLONE_NEWNET only changes
    // this thread's network namespace.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc < 0 {
        return Err(Error::last_os(format!("cannot enter namespace {path}")));
    }
    Ok(())
}

/// SIGINT/SIGTERM handlers that only set [`INTERRUPTED`], so the wait loops return and the
/// namespace guard runs; the previous handlers come back on drop.
struct InterruptHandlers {
    previous: Vec<(nix::sys::signal::Signal, nix::sys::signal::SigAction)>,
}

extern "C" fn note_interrupt(_signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

impl InterruptHandlers {
    fn install() -> Result<InterruptHandlers, Error> {
        use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
        INTERRUPTED.store(false, Ordering::SeqCst);
        // No SA_RESTART: a blocking recv returns EINTR, so the client notices at once.
        let action = SigAction::new(SigHandler::Handler(note_interrupt), SaFlags::empty(), SigSet::empty());
        let mut previous = Vec::new();
        for signal in [Signal::SIGINT, Signal::SIGTERM] {
            // SAFETY: the handler only performs an atomic store, which is async-signal-safe.
            let old = unsafe { sigaction(signal, &action) }
                .map_err(|e| Error::sys(format!("cannot install {signal} handler"), e))?;
            previous.push((signal, old));
        }
        Ok(InterruptHandlers { previous })
    }
}

impl Drop for InterruptHandlers {
    fn drop(&mut self) {
        for (signal, old) in self.previous.drain(..) {
            // SAFETY: restores the action that was in place before install(), which the
            // program had installed itself (or the default).
            let _ = unsafe { nix::sys::signal::sigaction(signal, &old) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_and_own_namespaces_are_targets() {
        assert!(check_target("127.0.0.1".parse().unwrap()).is_ok());
        assert!(check_target("10.200.7.2".parse().unwrap()).is_ok());
        assert!(check_target("8.8.8.8".parse().unwrap()).is_err());
        assert!(check_target("10.1.2.3".parse().unwrap()).is_err());
    }
}
