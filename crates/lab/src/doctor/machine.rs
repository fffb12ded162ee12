//! The machine the doctor examines: its files below a root directory (`/` for this machine; a
//! copy of another one's `/proc`, `/sys` and `/etc` for tests, or to examine a robot from a
//! laptop), and its CAN interfaces' settings, which Linux gives over netlink rather than in
//! files. Everything here only reads.

use rtloop_rt::setup::{parse_cpu_list, ResourceLimit};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Where the CAN interfaces' bit timing and state come from.
#[derive(Debug, Clone, PartialEq)]
enum CanSource {
    /// This machine's kernel, over netlink (RTM_GETLINK, unprivileged).
    Netlink,
    /// Given by the caller (tests; a tree copied from another machine).
    Given(Vec<CanLink>),
    /// Not known: the files alone do not hold them.
    Unknown,
}

/// The machine the doctor examines. [`Machine::this`] is the one it runs on; [`Machine::at`]
/// reads a tree that stands for another one (a Pi's `/proc` and `/sys`, say), whose CAN
/// settings [`Machine::with_can_links`] supplies.
#[derive(Debug, Clone, PartialEq)]
pub struct Machine {
    root: PathBuf,
    can: CanSource,
    service: String,
}

/// The systemd service the doctor looks for unless told otherwise (`rtloop.service`, as
/// docs/robot.md installs it).
pub const DEFAULT_SERVICE: &str = "rtloop";

impl Machine {
    /// This machine: files from `/`, CAN settings over netlink.
    pub fn this() -> Machine {
        Machine { root: PathBuf::from("/"), can: CanSource::Netlink, service: DEFAULT_SERVICE.into() }
    }

    /// The machine whose `/` is `root` (`proc/`, `sys/`, `etc/` below it). Its CAN
    /// interfaces' bit timing is unknown unless given with [`Machine::with_can_links`]; when
    /// `root` is `/` this is [`Machine::this`].
    pub fn at(root: impl Into<PathBuf>) -> Machine {
        let root = root.into();
        if root == Path::new("/") {
            return Machine::this();
        }
        Machine { root, can: CanSource::Unknown, service: DEFAULT_SERVICE.into() }
    }

    /// The CAN interfaces' settings as netlink would give them (for a tree that is not this
    /// machine's).
    pub fn with_can_links(mut self, links: Vec<CanLink>) -> Machine {
        self.can = CanSource::Given(links);
        self
    }

    /// Look for the systemd service `name` (`name.service`) instead of `rtloop`.
    pub fn with_service(mut self, name: &str) -> Machine {
        self.service = name.trim_end_matches(".service").to_string();
        self
    }

    /// The directory standing for `/`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether this is the machine the doctor runs on (its own process is `/proc/self`).
    pub fn is_this(&self) -> bool {
        self.can == CanSource::Netlink
    }

    /// The service name (without `.service`).
    pub fn service(&self) -> &str {
        &self.service
    }

    /// Where the machine's `path` (absolute) is.
    pub(crate) fn path(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    /// The content of the machine's file `path`, trimmed, or why there is none, as a
    /// sentence fragment naming the machine's path ("absent: /sys/kernel/realtime").
    pub(crate) fn read(&self, path: &str) -> Result<String, String> {
        std::fs::read_to_string(self.path(path)).map(|s| s.trim().to_string()).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("absent: {path}"),
            std::io::ErrorKind::PermissionDenied => format!("unreadable (permission denied): {path}"),
            _ => format!("unreadable ({e}): {path}"),
        })
    }

    /// The raw bytes of the machine's file `path` (device-tree properties are binary).
    pub(crate) fn read_bytes(&self, path: &str) -> Option<Vec<u8>> {
        std::fs::read(self.path(path)).ok()
    }

    /// Whether the machine has `path`.
    pub(crate) fn exists(&self, path: &str) -> bool {
        self.path(path).exists()
    }

    /// The names in the machine's directory `path`, sorted (empty when it cannot be read).
    pub(crate) fn list(&self, path: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path(path))
            .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        names.sort();
        names
    }

    /// The last component of where the machine's link `path` points, as sysfs names a driver
    /// (`…/driver -> ../../bus/spi/drivers/spidev`).
    pub(crate) fn link_name(&self, path: &str) -> Option<String> {
        let target = std::fs::read_link(self.path(path)).ok()?;
        Some(target.file_name()?.to_string_lossy().into_owned())
    }

    /// A CPU list file (`/sys/devices/system/cpu/online`).
    pub(crate) fn cpu_list(&self, path: &str) -> Option<Vec<usize>> {
        parse_cpu_list(&self.read(path).ok()?)
    }

    /// An integer file (`/proc/sys/kernel/sched_rt_runtime_us`).
    pub(crate) fn number(&self, path: &str) -> Option<i64> {
        self.read(path).ok()?.parse().ok()
    }

    /// The process `pid` (`"self"`: the doctor's own on this machine; in a tree,
    /// `proc/self` is whatever the tree holds there).
    pub(crate) fn process(&self, pid: &str) -> Option<Process> {
        let status = self.read(&format!("/proc/{pid}/status")).ok()?;
        let limits = self.read(&format!("/proc/{pid}/limits")).ok();
        let field = |name: &str| {
            status.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')).map(|v| v.trim().to_string())
        };
        let euid = field("Uid").and_then(|v| v.split_whitespace().nth(1)?.parse().ok());
        let cap_eff = field("CapEff").and_then(|v| u64::from_str_radix(&v, 16).ok());
        let limit = |name: &str| limits.as_deref().and_then(|l| parse_limit(l, name));
        Some(Process {
            pid: pid.to_string(),
            name: field("Name").unwrap_or_default(),
            euid,
            cap_sys_nice: cap_eff.map(|c| c & (1 << CAP_SYS_NICE) != 0),
            cap_ipc_lock: cap_eff.map(|c| c & (1 << CAP_IPC_LOCK) != 0),
            cpus: field("Cpus_allowed_list").and_then(|v| parse_cpu_list(&v)),
            locked_kib: field("VmLck").and_then(|v| v.split_whitespace().next()?.parse().ok()),
            rlimit_rtprio: limit("Max realtime priority"),
            rlimit_memlock: limit("Max locked memory"),
        })
    }

    /// The threads of process `pid`: their names, policies, priorities and CPUs.
    pub(crate) fn threads(&self, pid: &str) -> Vec<Thread> {
        self.list(&format!("/proc/{pid}/task"))
            .into_iter()
            .filter_map(|tid| {
                let stat = self.read(&format!("/proc/{pid}/task/{tid}/stat")).ok()?;
                let (name, policy, priority) = parse_stat(&stat)?;
                let status = self.read(&format!("/proc/{pid}/task/{tid}/status")).ok();
                let cpus = status.as_deref().and_then(|s| {
                    s.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).and_then(parse_cpu_list)
                });
                Some(Thread { tid, name, policy, priority, cpus })
            })
            .collect()
    }

    /// The processes named `name` (their `comm`), but the doctor's own.
    pub(crate) fn processes_named(&self, name: &str) -> Vec<String> {
        let own = self.is_this().then(|| std::process::id().to_string());
        self.list("/proc")
            .into_iter()
            .filter(|p| p.bytes().all(|b| b.is_ascii_digit()) && Some(p) != own.as_ref())
            .filter(|p| self.read(&format!("/proc/{p}/comm")).is_ok_and(|c| c == name))
            .collect()
    }

    /// A device-tree property (`model`, `compatible`, `hat/product`), from /proc/device-tree
    /// or, where that link is missing, /sys/firmware/devicetree/base.
    pub(crate) fn device_tree(&self, property: &str) -> Option<Vec<u8>> {
        self.read_bytes(&format!("/proc/device-tree/{property}"))
            .or_else(|| self.read_bytes(&format!("/sys/firmware/devicetree/base/{property}")))
    }

    /// The device tree's model ("Raspberry Pi 4 Model B Rev 1.4"), when the machine has one.
    pub(crate) fn device_model(&self) -> Option<String> {
        self.device_tree("model").map(|b| device_tree_text(&b)).filter(|s| !s.is_empty())
    }

    /// The settings of CAN interface `name`, when they can be known.
    pub(crate) fn can_link(&self, name: &str) -> Option<CanLink> {
        match &self.can {
            CanSource::Netlink => netlink_can_link(name),
            CanSource::Given(links) => links.iter().find(|l| l.name == name).cloned(),
            CanSource::Unknown => None,
        }
    }

    /// Whether [`Machine::can_link`] can know anything (false for a tree without given links).
    pub(crate) fn knows_can_links(&self) -> bool {
        self.can != CanSource::Unknown
    }
}

/// A device-tree string property as text: NUL-separated strings joined with ", ", control
/// characters dropped, at most 120 characters.
pub(crate) fn device_tree_text(bytes: &[u8]) -> String {
    let text: Vec<String> = bytes
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).chars().filter(|c| !c.is_control()).collect())
        .collect();
    text.join(", ").chars().take(120).collect()
}

/// Capability bit numbers from linux/capability.h.
const CAP_IPC_LOCK: u32 = 14;
const CAP_SYS_NICE: u32 = 23;

/// One process as /proc shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Process {
    pub pid: String,
    pub name: String,
    pub euid: Option<u32>,
    pub cap_sys_nice: Option<bool>,
    pub cap_ipc_lock: Option<bool>,
    pub cpus: Option<Vec<usize>>,
    pub locked_kib: Option<u64>,
    pub rlimit_rtprio: Option<ResourceLimit>,
    pub rlimit_memlock: Option<ResourceLimit>,
}

/// One thread of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Thread {
    pub tid: String,
    pub name: String,
    /// The kernel's policy number (0 other, 1 fifo, 2 rr, 3 batch, 5 idle, 6 deadline).
    pub policy: i32,
    pub priority: i32,
    pub cpus: Option<Vec<usize>>,
}

/// A line of /proc/PID/limits ("Max realtime priority  0  0"): soft and hard, `None` for
/// "unlimited".
fn parse_limit(limits: &str, name: &str) -> Option<ResourceLimit> {
    let rest = limits.lines().find_map(|l| l.strip_prefix(name))?;
    let mut values = rest.split_whitespace().map(|v| if v == "unlimited" { Ok(None) } else { v.parse().map(Some) });
    let soft = values.next()?.ok()?;
    let hard = values.next()?.ok()?;
    Some(ResourceLimit { soft, hard })
}

/// The name, policy and real-time priority from /proc/PID/task/TID/stat: after the
/// parenthesised name (which may hold spaces and parentheses), field 3 is the state, field
/// 40 the real-time priority and 41 the policy.
fn parse_stat(stat: &str) -> Option<(String, i32, i32)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    let priority = fields.get(40 - 3)?.parse().ok()?;
    let policy = fields.get(41 - 3)?.parse().ok()?;
    Some((name, policy, priority))
}

/// One CAN interface's settings, as `ip -details link show` prints them (netlink's
/// IFLA_CAN_* attributes). Plain data, so a test can describe a Pi's interfaces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct CanLink {
    /// The interface, e.g. `can0`.
    pub name: String,
    /// Administratively up.
    pub up: bool,
    /// CAN FD mode on (`fd on`).
    pub fd: Option<bool>,
    /// The controller's state: `ERROR-ACTIVE`, `ERROR-WARNING`, `ERROR-PASSIVE`, `BUS-OFF`,
    /// `STOPPED` or `SLEEPING`.
    pub state: Option<String>,
    /// The arbitration phase's timing (`bitrate`, `sample-point`, `sjw`).
    pub nominal: Option<BitTiming>,
    /// The data phase's (`dbitrate`, `dsample-point`, `dsjw`).
    pub data: Option<BitTiming>,
    /// Milliseconds after which a bus-off controller restarts by itself (0: never).
    pub restart_ms: Option<u32>,
    /// The controller's clock, Hz.
    pub clock_hz: Option<u32>,
}

/// One phase's bit timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub struct BitTiming {
    /// Bits per second.
    pub bitrate: u32,
    /// Where in the bit the controller samples, in tenths of a percent (666: 66.6 %).
    pub sample_point_permille: u32,
    /// Synchronisation jump width, time quanta.
    pub sjw: u32,
    /// Phase segment 2, time quanta (the jump width cannot exceed it).
    pub phase_seg2: u32,
    /// The largest jump width the controller allows, when it says.
    pub sjw_max: Option<u32>,
}

impl BitTiming {
    /// The largest jump width this timing allows: the controller's maximum, and never more
    /// than phase segment 2.
    pub fn largest_sjw(&self) -> u32 {
        self.sjw_max.map_or(self.phase_seg2, |m| m.min(self.phase_seg2)).max(1)
    }
}

/// The settings of CAN interface `name` from this machine's kernel, over netlink.
fn netlink_can_link(name: &str) -> Option<CanLink> {
    use socketcan::nl::{CanCtrlMode, CanInterface, CanState};
    let details = CanInterface::open(name).ok()?.details().ok()?;
    let can = details.can;
    let timing = |t: Option<socketcan::nl::CanBitTiming>, max: Option<u32>| {
        t.filter(|t| t.bitrate > 0).map(|t| BitTiming {
            bitrate: t.bitrate,
            sample_point_permille: t.sample_point,
            sjw: t.sjw,
            phase_seg2: t.phase_seg2,
            sjw_max: max,
        })
    };
    let state = can.state.map(|s| {
        match s {
            CanState::ErrorActive => "ERROR-ACTIVE",
            CanState::ErrorWarning => "ERROR-WARNING",
            CanState::ErrorPassive => "ERROR-PASSIVE",
            CanState::BusOff => "BUS-OFF",
            CanState::Stopped => "STOPPED",
            CanState::Sleeping => "SLEEPING",
        }
        .to_string()
    });
    Some(CanLink {
        name: name.to_string(),
        up: details.is_up,
        fd: can.ctrl_mode.map(|m| m.has_mode(CanCtrlMode::Fd)),
        state,
        nominal: timing(can.bit_timing, can.bit_timing_const.map(|c| c.sjw_max)),
        data: timing(can.data_bit_timing, can.data_bit_timing_const.map(|c| c.sjw_max)),
        restart_ms: can.restart_ms,
        clock_hz: can.clock.map(|c| c.freq),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_lines_parse_with_unlimited() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max locked memory         8388608              unlimited            bytes     \n\
                    Max realtime priority     95                   95                   \n";
        assert_eq!(parse_limit(text, "Max locked memory"), Some(ResourceLimit { soft: Some(8388608), hard: None }));
        assert_eq!(parse_limit(text, "Max realtime priority"), Some(ResourceLimit { soft: Some(95), hard: Some(95) }));
        assert_eq!(parse_limit(text, "Max nice priority"), None);
        assert_eq!(parse_limit("Max realtime priority  x 0", "Max realtime priority"), None);
    }

    #[test]
    fn a_stat_line_gives_name_policy_and_priority_whatever_the_name_holds() {
        let tail = "S 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 -81 0 4 0 100 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 \
                    0 0 17 3 80 1 0 0 0";
        let (name, policy, priority) = parse_stat(&format!("1234 (rtloop-cycle) {tail}")).unwrap();
        assert_eq!((name.as_str(), policy, priority), ("rtloop-cycle", 1, 80));
        let (name, ..) = parse_stat(&format!("1234 (a) b (c) {tail}")).unwrap();
        assert_eq!(name, "a) b (c");
        assert_eq!(parse_stat("1234 (short) S 1"), None);
    }

    #[test]
    fn the_largest_jump_width_is_bounded_by_phase_segment_two() {
        let t =
            BitTiming { bitrate: 1_000_000, sample_point_permille: 666, sjw: 1, phase_seg2: 13, sjw_max: Some(128) };
        assert_eq!(t.largest_sjw(), 13);
        assert_eq!(BitTiming { sjw_max: Some(4), ..t }.largest_sjw(), 4);
        assert_eq!(BitTiming { sjw_max: None, ..t }.largest_sjw(), 13);
    }
}
