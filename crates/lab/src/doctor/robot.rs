//! The robot's checks: which machine this is (a Raspberry Pi, a pi3hat on it), the pi3hat's SPI
//! devices and their clock, each CAN interface's bit timing and state against moteus's, the
//! interrupts that landed on isolated CPUs, the systemd service's limits and the running
//! loop's threads. On a machine without a robot's parts they say so (info), never fail.

use super::kernel::{housekeeping, Kernel};
use super::machine::device_tree_text;
use super::{check, BitTiming, Check, Machine, Status};
use rtloop_io::socketcan::moteus_ip_link;
use rtloop_io::spi::spidev::ENABLE_SPI;
use rtloop_io::spi::{ChipSelect, SpiTiming};
use rtloop_rt::setup::format_cpu_list;
use std::collections::BTreeMap;

/// The robot's checks, in the order of [`super::CHECK_NAMES`].
pub fn checks(m: &Machine) -> Vec<Check> {
    let k = Kernel::read(m);
    let board = Board::read(m);
    let unit = Unit::find(m);
    vec![
        machine(&board),
        spi(m, &board, unit.as_ref()),
        can(m),
        irq_landing(m, &k),
        service(m, &k, unit.as_ref()),
        service_process(m, &k, unit.as_ref()),
    ]
}

/// The Raspberry Pi families whose SPI differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    /// BCM2837 (Pi 3, Zero 2) or BCM2711 (Pi 4, 400, CM4): the BCM283x SPI0 and AUX SPI1
    /// that `pi3hat:mem` drives.
    Bcm283x,
    /// BCM2712 (Pi 5, 500, CM5): the header's SPI sits behind the RP1 south bridge.
    Rp1,
}

/// What the device tree says about the board and its HAT.
struct Board {
    model: Option<String>,
    family: Option<Family>,
    /// The HAT's product string when a HAT EEPROM names the pi3hat.
    pi3hat: Option<String>,
}

/// Whether a HAT EEPROM's product string names the pi3hat ("pi3hat", "pi3 hat", any case).
fn names_pi3hat(product: &str) -> bool {
    let squeezed: String = product.to_ascii_lowercase().chars().filter(|c| !c.is_whitespace()).collect();
    squeezed.contains("pi3hat")
}

impl Board {
    fn read(m: &Machine) -> Board {
        let compatible = m.device_tree("compatible").unwrap_or_default();
        let has = |name: &[u8]| compatible.split(|&b| b == 0).any(|s| s == name);
        let family = if has(b"brcm,bcm2712") {
            Some(Family::Rp1)
        } else if has(b"brcm,bcm2711") || has(b"brcm,bcm2837") || has(b"brcm,bcm2710") {
            Some(Family::Bcm283x)
        } else {
            None
        };
        let product = m.device_tree("hat/product").map(|b| device_tree_text(&b));
        let pi3hat = product.filter(|p| names_pi3hat(p));
        Board { model: m.device_model(), family, pi3hat }
    }

    fn is_pi(&self) -> bool {
        self.family.is_some() || self.model.as_deref().is_some_and(|m| m.starts_with("Raspberry Pi"))
    }
}

fn machine(b: &Board) -> Check {
    let Some(model) = &b.model else {
        return check(
            "machine",
            Status::Info,
            "no device-tree model (a PC or a VM): the SPI, CAN and service checks below describe a robot's computer",
            None,
        );
    };
    let soc = match b.family {
        Some(Family::Rp1) => "; BCM2712: SPI, GPIO and the 40-pin header behind the RP1",
        Some(Family::Bcm283x) => "; BCM283x SPI0 and AUX SPI1 on the header",
        None => "",
    };
    let hat = match &b.pi3hat {
        Some(p) => format!("; HAT: {p}"),
        None => "; no pi3hat named by a HAT EEPROM".into(),
    };
    check("machine", Status::Info, format!("{model}{soc}{hat}"), None)
}

/// The pi3hat's three spidev devices ("spidev1.0", "spidev1.1", "spidev0.0") and their bus
/// numbers.
fn pi3hat_devices() -> [(&'static str, &'static str); 3] {
    [ChipSelect::Spi1Cs0, ChipSelect::Spi1Cs1, ChipSelect::Spi0Cs0].map(|cs| {
        let name = cs.spidev_path().trim_start_matches("/dev/");
        let bus = &name["spidev".len()..name.find('.').unwrap_or(name.len())];
        (name, bus)
    })
}

fn spi(m: &Machine, b: &Board, unit: Option<&Unit>) -> Check {
    let wanted_hz = SpiTiming::default().speed_hz;
    let mut found = Vec::new();
    let mut missing = Vec::new();
    let mut slow = Vec::new();
    for (name, bus) in pi3hat_devices() {
        let dir = format!("/sys/class/spidev/{name}");
        if !m.exists(&dir) {
            missing.push(format!("/dev/{name}"));
            continue;
        }
        let max_hz = m
            .read_bytes(&format!("{dir}/device/of_node/spi-max-frequency"))
            .and_then(|b| Some(u32::from_be_bytes(b.get(..4)?.try_into().ok()?)));
        let driver = m.link_name(&format!("/sys/class/spi_master/spi{bus}/device/driver"));
        let mut text = format!("/dev/{name}");
        let mut about = Vec::new();
        if let Some(d) = &driver {
            about.push(d.clone());
        }
        match max_hz {
            Some(hz) => {
                about.push(format!("spi-max-frequency {}", hz_text(hz)));
                if hz < wanted_hz {
                    slow.push(format!("/dev/{name} ({})", hz_text(hz)));
                }
            }
            None => about.push("spi-max-frequency not in the device tree".into()),
        }
        if let Some(mode) = device_access(m, &format!("/dev/{name}")) {
            about.push(mode);
        }
        if !about.is_empty() {
            text.push_str(&format!(" ({})", about.join(", ")));
        }
        found.push(text);
    }
    let bufsiz: Option<usize> = m.read("/sys/module/spidev/parameters/bufsiz").ok().and_then(|s| s.parse().ok());
    let pi5 = b.family == Some(Family::Rp1);
    let mut value = if found.is_empty() {
        "no pi3hat SPI device (/dev/spidev0.0, /dev/spidev1.0, /dev/spidev1.1)".to_string()
    } else {
        found.join("; ")
    };
    if !found.is_empty() && !missing.is_empty() {
        value.push_str(&format!("; missing {}", missing.join(", ")));
    }
    if let Some(n) = bufsiz {
        value.push_str(&format!("; spidev bufsiz {n}"));
    }
    if pi5 {
        value.push_str(
            "; a Pi 5's SPI is the RP1's: pi3hat:spidev only (pi3hat:mem, like the official library, drives BCM283x \
             registers a Pi 5 does not have)",
        );
    } else if b.family == Some(Family::Bcm283x) && m.exists("/dev/mem") {
        value.push_str("; pi3hat:mem possible as root (/dev/mem)");
    }
    // A pi3hat is known to be there when its EEPROM says so or the service drives one.
    let needed = b.pi3hat.is_some() || unit.and_then(|u| u.get("ExecStart")).is_some_and(|e| e.contains("pi3hat"));
    if !missing.is_empty() {
        let status = if needed { Status::Warn } else { Status::Info };
        let why = if needed { "the pi3hat's buses need them" } else { "only a pi3hat (pi3hat:spidev) needs them" };
        let fix = (needed || b.is_pi()).then(|| ENABLE_SPI.to_string());
        return check("spi", status, format!("{value} ({why})"), fix);
    }
    if !slow.is_empty() {
        return check(
            "spi",
            Status::Warn,
            value,
            Some(format!(
                "{} clock at most below the pi3hat's {}: raise spi-max-frequency in the overlay (the Raspberry Pi \
                 spi overlays give 125 MHz)",
                slow.join(", "),
                hz_text(wanted_hz)
            )),
        );
    }
    if bufsiz.is_some_and(|n| n < 256) {
        return check(
            "spi",
            Status::Warn,
            value,
            Some("spidev.bufsiz=4096 on the kernel command line: a pi3hat transfer needs up to 256 bytes".into()),
        );
    }
    check("spi", Status::Pass, value, None)
}

/// "10 MHz", "125 MHz", "500 kHz".
fn hz_text(hz: u32) -> String {
    if hz >= 1_000_000 && hz % 100_000 == 0 {
        format!("{} MHz", f64::from(hz) / 1e6)
    } else if hz >= 1_000 {
        format!("{} kHz", f64::from(hz) / 1e3)
    } else {
        format!("{hz} Hz")
    }
}

/// "root:spi 0660" for a device node, its group named from the machine's /etc/group.
fn device_access(m: &Machine, path: &str) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(m.path(path)).ok()?;
    let names = m.read("/etc/group").unwrap_or_default();
    let group = names
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.get(2)? == &meta.gid().to_string()).then(|| f[0].to_string())
        })
        .unwrap_or_else(|| meta.gid().to_string());
    Some(format!("group {group}, mode {:04o}", meta.mode() & 0o7777))
}

/// The sample point moteus uses, tenths of a percent, and how far an adapter's nearest may be.
const MOTEUS_SAMPLE_POINT: u32 = 666;
const SAMPLE_POINT_TOLERANCE: u32 = 50;
/// The jump widths of [`rtloop_io::socketcan::MOTEUS_CAN_TIMING`], or the largest an adapter allows.
const MOTEUS_SJW: u32 = 10;
const MOTEUS_DSJW: u32 = 5;

/// The CAN interfaces: network interfaces of type ARPHRD_CAN (280).
fn can_interfaces(m: &Machine) -> Vec<String> {
    m.list("/sys/class/net")
        .into_iter()
        .filter(|n| m.read(&format!("/sys/class/net/{n}/type")).is_ok_and(|t| t == "280"))
        .collect()
}

/// What is wrong with one interface for moteus, and its description.
fn can_link_verdict(m: &Machine, name: &str) -> (String, Vec<String>) {
    let mtu: Option<u32> = m.read(&format!("/sys/class/net/{name}/mtu")).ok().and_then(|s| s.parse().ok());
    let driver = m.link_name(&format!("/sys/class/net/{name}/device/driver"));
    let operstate = m.read(&format!("/sys/class/net/{name}/operstate")).ok();
    let mut problems = Vec::new();
    let mut about = Vec::new();
    if let Some(d) = &driver {
        about.push(d.clone());
    }
    let Some(link) = m.can_link(name) else {
        about.push(format!("operstate {}", operstate.as_deref().unwrap_or("unknown")));
        if let Some(mtu) = mtu {
            about.push(format!("mtu {mtu}"));
        }
        if m.knows_can_links() {
            about.push("its bit timing could not be read (netlink)".into());
        } else {
            about.push("bit timing not in the files (netlink: run the doctor on the machine itself)".into());
        }
        if mtu == Some(16) {
            problems.push("classic CAN only (mtu 16)".into());
        }
        return (format!("{name}: {}", about.join(", ")), problems);
    };
    about.push(if link.up { "up".into() } else { "down".into() });
    if !link.up {
        problems.push("down".into());
    }
    match link.fd {
        Some(true) => about.push("FD".into()),
        _ => {
            about.push("not FD".into());
            problems.push("CAN FD off (moteus talks CAN FD)".into());
        }
    }
    let phase = |label: &str, t: &Option<BitTiming>, rate: u32, sjw: u32, problems: &mut Vec<String>| -> String {
        let Some(t) = t else {
            problems.push(format!("no {label} bit timing set"));
            return format!("{label} unset");
        };
        if t.bitrate != rate {
            problems.push(format!("{label} bitrate {} (moteus: {rate})", t.bitrate));
        }
        if t.sample_point_permille.abs_diff(MOTEUS_SAMPLE_POINT) > SAMPLE_POINT_TOLERANCE {
            problems.push(format!("{label} sample point {} (moteus: 66.6 %)", permille_text(t.sample_point_permille)));
        }
        let wanted = sjw.min(t.largest_sjw());
        if t.sjw < wanted {
            problems.push(format!("{label} sjw {} (moteus works best with the largest: {wanted} here)", t.sjw));
        }
        format!("{label} {} at {} sjw {}", t.bitrate, permille_text(t.sample_point_permille), t.sjw)
    };
    about.push(phase("nominal", &link.nominal, 1_000_000, MOTEUS_SJW, &mut problems));
    if link.fd == Some(true) {
        about.push(phase("data", &link.data, 5_000_000, MOTEUS_DSJW, &mut problems));
    }
    if let Some(state) = &link.state {
        about.push(state.clone());
        match state.as_str() {
            "ERROR-ACTIVE" | "STOPPED" => {}
            "BUS-OFF" => problems.push(
                "bus off: its frames were not acknowledged (no servo powered, a bit timing that differs, no \
                 termination)"
                    .into(),
            ),
            other => problems.push(format!("{other}: errors on the bus")),
        }
    }
    match link.restart_ms {
        Some(0) => problems.push("restart-ms 0: after a bus-off it stays off until restarted by hand".into()),
        Some(ms) => about.push(format!("restart-ms {ms}")),
        None => {}
    }
    if let Some(hz) = link.clock_hz {
        about.push(format!("clock {}", hz_text(hz)));
    }
    (format!("{name}: {}", about.join(", ")), problems)
}

/// "66.6 %".
fn permille_text(p: u32) -> String {
    format!("{:.1} %", f64::from(p) / 10.0)
}

fn can(m: &Machine) -> Check {
    let names = can_interfaces(m);
    if names.is_empty() {
        return check(
            "can",
            Status::Info,
            "no CAN interface (none of type 280 in /sys/class/net): only socketcan: buses need one",
            None,
        );
    }
    let mut values = Vec::new();
    let mut fixes = Vec::new();
    let mut all_problems = Vec::new();
    for name in &names {
        let (value, problems) = can_link_verdict(m, name);
        values.push(value);
        if !problems.is_empty() {
            all_problems.push(format!("{name}: {}", problems.join(", ")));
            fixes.push(moteus_ip_link(name));
        }
    }
    let mut value = values.join("; ");
    if all_problems.is_empty() {
        let status = if m.knows_can_links() { Status::Pass } else { Status::Info };
        return check("can", status, value, None);
    }
    value.push_str(&format!(" — {}", all_problems.join("; ")));
    check("can", Status::Warn, value, Some(format!("{} (docs/robot.md, \"SocketCAN\")", fixes.join("; "))))
}

/// Interrupts counted on the isolated CPUs since boot, from /proc/interrupts: the IRQs that
/// actually landed where the loop runs (irq-affinity says where they may).
fn irq_landing(m: &Machine, k: &Kernel) -> Check {
    if k.isolated.is_empty() {
        return check("irq-landing", Status::Info, "no isolated CPU: interrupts land on any CPU", None);
    }
    let Ok(text) = m.read("/proc/interrupts") else {
        return check("irq-landing", Status::Info, "unreadable: /proc/interrupts", None);
    };
    let mut lines = text.lines();
    let cpus: Vec<usize> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|c| c.strip_prefix("CPU")?.parse().ok())
        .collect();
    let mut landed = Vec::new();
    for line in lines {
        let Some((irq, rest)) = line.split_once(':') else { continue };
        let irq = irq.trim();
        // Only numbered interrupts can be moved; the named ones (LOC, IPI0, …) are per-CPU.
        if irq.is_empty() || !irq.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let counts: Vec<u64> = fields.iter().take(cpus.len()).map_while(|f| f.parse().ok()).collect();
        let name = fields.get(counts.len()..).map(|f| f.last().copied().unwrap_or("")).unwrap_or("");
        // The per-CPU architected timer ticks on every CPU (less with nohz_full); it cannot move.
        if name == "arch_timer" {
            continue;
        }
        let on_isolated: u64 =
            cpus.iter().zip(&counts).filter(|(cpu, _)| k.isolated.contains(cpu)).map(|(_, n)| *n).sum();
        if on_isolated > 0 {
            landed.push(format!("{irq} {name} ({on_isolated})"));
        }
    }
    let isolated = format_cpu_list(&k.isolated);
    if landed.is_empty() {
        return check("irq-landing", Status::Pass, format!("no movable interrupt counted on CPUs {isolated}"), None);
    }
    let first = landed.first().and_then(|l| l.split_whitespace().next()).unwrap_or("N").to_string();
    check(
        "irq-landing",
        Status::Warn,
        format!("counted on isolated CPUs {isolated} since boot: {}", landed.join(", ")),
        Some(format!(
            "move each to the housekeeping CPUs, e.g. echo {} > /proc/irq/{first}/smp_affinity_list (at boot: \
             irqaffinity={})",
            housekeeping(&k.online, &k.isolated),
            housekeeping(&k.online, &k.isolated)
        )),
    )
}

/// A systemd unit's `[Service]` settings that matter here, the last assignment winning, drop-ins
/// read after the unit as systemd does.
#[derive(Debug, Default)]
struct Unit {
    /// Where it was found.
    path: String,
    settings: BTreeMap<String, String>,
}

/// Where systemd looks for system units, most specific first.
const UNIT_DIRS: &[&str] = &[
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
];

impl Unit {
    fn find(m: &Machine) -> Option<Unit> {
        let file = format!("{}.service", m.service());
        let path = UNIT_DIRS.iter().map(|d| format!("{d}/{file}")).find(|p| m.exists(p))?;
        let mut unit = Unit { path: path.clone(), ..Unit::default() };
        unit.parse(&m.read(&path).unwrap_or_default());
        for dir in UNIT_DIRS {
            let drop_ins = format!("{dir}/{file}.d");
            for conf in m.list(&drop_ins).into_iter().filter(|c| c.ends_with(".conf")) {
                unit.parse(&m.read(&format!("{drop_ins}/{conf}")).unwrap_or_default());
            }
        }
        Some(unit)
    }

    fn parse(&mut self, text: &str) {
        let mut in_service = false;
        let mut pending = String::new();
        for raw in text.lines() {
            // A line ending in a backslash continues on the next.
            let line = raw.trim_end();
            if let Some(part) = line.strip_suffix('\\') {
                pending.push_str(part);
                pending.push(' ');
                continue;
            }
            let full = std::mem::take(&mut pending) + line;
            let line = full.trim();
            if line.starts_with('[') {
                in_service = line == "[Service]";
                continue;
            }
            if !in_service || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some((key, value)) = line.split_once('=') {
                self.settings.insert(key.trim().to_string(), value.trim().to_string());
            }
        }
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.settings.get(key).map(String::as_str).filter(|v| !v.is_empty())
    }

    /// The program ExecStart runs (without systemd's `-`, `@`, `+`, `!` prefixes).
    fn program(&self) -> Option<String> {
        let exec = self.get("ExecStart")?;
        let first = exec.split_whitespace().next()?.trim_start_matches(['-', '@', '+', '!', ':']);
        Some(first.rsplit('/').next().unwrap_or(first).to_string())
    }

    /// The CPUs given after `--cpu` on the ExecStart line.
    fn loop_cpus(&self) -> Option<Vec<usize>> {
        let exec = self.get("ExecStart")?;
        let mut words = exec.split_whitespace();
        while let Some(w) = words.next() {
            let list = match w.strip_prefix("--cpu") {
                Some("") => words.next()?,
                Some(rest) => rest.strip_prefix('=')?,
                None => continue,
            };
            return rtloop_rt::setup::parse_cpu_list(list);
        }
        None
    }

    /// Runs as root (no `User=`, or `User=root`).
    fn as_root(&self) -> bool {
        self.get("User").is_none_or(|u| u == "root" || u == "0")
    }
}

/// A `Limit…=` value as systemd reads it: a number with an optional K/M/G/T suffix (1024s),
/// or `infinity` (`None`); a `soft:hard` pair gives its soft part.
fn unit_limit(value: &str) -> Option<Option<u64>> {
    let soft = value.split(':').next()?.trim();
    if soft.eq_ignore_ascii_case("infinity") {
        return Some(None);
    }
    let (digits, factor) = match soft.chars().last()? {
        'K' | 'k' => (&soft[..soft.len() - 1], 1u64 << 10),
        'M' | 'm' => (&soft[..soft.len() - 1], 1 << 20),
        'G' | 'g' => (&soft[..soft.len() - 1], 1 << 30),
        'T' | 't' => (&soft[..soft.len() - 1], 1 << 40),
        _ => (soft, 1),
    };
    Some(Some(digits.trim().parse::<u64>().ok()?.checked_mul(factor)?))
}

/// The `LimitRTPRIO` the fixes suggest, as docs/robot.md's unit sets it: room for any priority
/// the loop asks for (`rtloop run`'s default is 40), below the kernel's own 99.
const SERVICE_PRIORITY_HINT: u64 = 95;

fn service(m: &Machine, k: &Kernel, unit: Option<&Unit>) -> Check {
    let name = m.service();
    let Some(unit) = unit else {
        return check(
            "service",
            Status::Info,
            format!("no {name}.service in {}: docs/robot.md installs one", UNIT_DIRS[0]),
            None,
        );
    };
    let mut problems: Vec<String> = Vec::new();
    let mut fixes: Vec<String> = Vec::new();
    let mut about = vec![unit.path.clone()];
    let root = unit.as_root();
    about.push(match unit.get("User") {
        Some(u) => format!("User={u}"),
        None => "runs as root".into(),
    });
    match unit.get("LimitRTPRIO").map(|v| (v, unit_limit(v))) {
        Some((v, Some(limit))) => {
            about.push(format!("LimitRTPRIO={v}"));
            if !root && limit == Some(0) {
                problems.push("LimitRTPRIO=0: SCHED_FIFO is refused".into());
                fixes.push(format!("LimitRTPRIO={SERVICE_PRIORITY_HINT}"));
            }
        }
        Some((v, None)) => problems.push(format!("LimitRTPRIO={v} is not a number")),
        None if root => {}
        None => {
            problems.push(format!(
                "no LimitRTPRIO: as {} the loop gets no real-time priority",
                unit.get("User").unwrap_or("")
            ));
            fixes.push(format!("LimitRTPRIO={SERVICE_PRIORITY_HINT}"));
        }
    }
    match unit.get("LimitMEMLOCK").map(|v| (v, unit_limit(v))) {
        Some((v, Some(None))) => about.push(format!("LimitMEMLOCK={v}")),
        Some((v, Some(Some(bytes)))) => {
            about.push(format!("LimitMEMLOCK={v}"));
            if !root {
                problems.push(format!(
                    "LimitMEMLOCK={v} ({} KiB): mlockall fails once the process outgrows it",
                    bytes / 1024
                ));
                fixes.push("LimitMEMLOCK=infinity".into());
            }
        }
        Some((v, None)) => problems.push(format!("LimitMEMLOCK={v} is not a number")),
        None if root => {}
        None => {
            problems.push("no LimitMEMLOCK: mlockall is limited to the default 8 MiB".into());
            fixes.push("LimitMEMLOCK=infinity".into());
        }
    }
    let keep = housekeeping(&k.online, &k.isolated);
    let affinity = unit.get("CPUAffinity").map(|v| rtloop_rt::setup::parse_cpu_list(&v.replace(' ', ",")));
    match &affinity {
        Some(Some(cpus)) => {
            about.push(format!("CPUAffinity={}", format_cpu_list(cpus)));
            let on_isolated: Vec<usize> = cpus.iter().copied().filter(|c| k.isolated.contains(c)).collect();
            if !on_isolated.is_empty() {
                problems.push(format!(
                    "CPUAffinity includes isolated CPUs {}: the service's other threads may run beside the loop",
                    format_cpu_list(&on_isolated)
                ));
                fixes.push(format!("CPUAffinity={keep}"));
            }
        }
        Some(None) => problems.push("CPUAffinity is not a CPU list".into()),
        None if !k.isolated.is_empty() => {
            problems.push("no CPUAffinity: the service's other threads may run anywhere".into());
            fixes.push(format!("CPUAffinity={keep}"));
        }
        None => {}
    }
    match unit.loop_cpus() {
        Some(cpus) => {
            about.push(format!("--cpu {}", format_cpu_list(&cpus)));
            if !k.isolated.is_empty() && !cpus.iter().all(|c| k.isolated.contains(c)) {
                problems.push(format!(
                    "the loop's --cpu {} is not an isolated CPU ({})",
                    format_cpu_list(&cpus),
                    format_cpu_list(&k.isolated)
                ));
                fixes.push(format!("--cpu {} on ExecStart", k.isolated.last().copied().unwrap_or(0)));
            }
        }
        None if !k.isolated.is_empty() => {
            problems.push("no --cpu on ExecStart: the loop is not pinned to an isolated CPU".into());
            fixes.push(format!("--cpu {} on ExecStart", k.isolated.last().copied().unwrap_or(0)));
        }
        None => {}
    }
    let value = about.join(", ");
    if problems.is_empty() {
        return check("service", Status::Pass, value, None);
    }
    let status = if problems.iter().any(|p| p.contains("is refused") || p.contains("no real-time priority")) {
        Status::Fail
    } else {
        Status::Warn
    };
    check(
        "service",
        status,
        format!("{value} — {}", problems.join("; ")),
        Some(format!(
            "in {} ([Service]): {}; then systemctl daemon-reload and restart {name}",
            unit.path,
            fixes.join(", ")
        )),
    )
}

/// The kernel's policy numbers.
fn policy_name(policy: i32) -> &'static str {
    match policy {
        0 => "SCHED_OTHER",
        1 => "SCHED_FIFO",
        2 => "SCHED_RR",
        3 => "SCHED_BATCH",
        5 => "SCHED_IDLE",
        6 => "SCHED_DEADLINE",
        _ => "unknown policy",
    }
}

fn service_process(m: &Machine, k: &Kernel, unit: Option<&Unit>) -> Check {
    let program = unit.and_then(Unit::program).unwrap_or_else(|| m.service().to_string());
    // The kernel keeps 15 bytes of a program's name as its comm.
    let comm: String = program.chars().take(15).collect();
    let pids = m.processes_named(&comm);
    let Some(pid) = pids.first() else {
        return check("service-process", Status::Info, format!("no {comm} process running"), None);
    };
    let Some(process) = m.process(pid) else {
        return check("service-process", Status::Info, format!("{comm} (pid {pid}) ended while being read"), None);
    };
    let threads = m.threads(pid);
    let realtime: Vec<_> = threads.iter().filter(|t| matches!(t.policy, 1 | 2 | 6)).collect();
    let mut about = vec![format!("{comm} pid {pid}")];
    let mut problems = Vec::new();
    let mut fixes = Vec::new();
    let limit = |l: Option<rtloop_rt::setup::ResourceLimit>, div: u64, unit_text: &str| {
        l.map_or("unreadable".into(), |l| l.soft.map_or("unlimited".into(), |v| format!("{}{unit_text}", v / div)))
    };
    about.push(format!(
        "rtprio limit {}, memlock limit {}",
        limit(process.rlimit_rtprio, 1, ""),
        limit(process.rlimit_memlock, 1024, " KiB")
    ));
    match process.locked_kib {
        Some(0) => {
            problems.push("no memory locked (mlockall refused, or not asked: --mlock)".to_string());
            fixes.push("LimitMEMLOCK=infinity in the unit, --mlock".to_string());
        }
        Some(kib) => about.push(format!("{kib} KiB locked")),
        None => {}
    }
    if realtime.is_empty() {
        problems.push(format!(
            "no thread runs SCHED_FIFO, SCHED_RR or SCHED_DEADLINE ({} threads, all at normal priority)",
            threads.len()
        ));
        fixes.push(format!("LimitRTPRIO={SERVICE_PRIORITY_HINT} in the unit (or run as root)"));
    }
    for t in &realtime {
        let cpus = t.cpus.as_deref().map(format_cpu_list).unwrap_or_else(|| "?".into());
        about.push(format!("thread {} {} {} on CPUs {cpus}", t.name, policy_name(t.policy), t.priority));
        if let Some(c) = &t.cpus {
            if !k.isolated.is_empty() && !c.iter().all(|cpu| k.isolated.contains(cpu)) {
                problems.push(format!(
                    "{} may run on CPUs {cpus}, not only the isolated {}",
                    t.name,
                    format_cpu_list(&k.isolated)
                ));
                fixes.push(format!("--cpu {}", k.isolated.last().copied().unwrap_or(0)));
            }
        }
    }
    let others_on_isolated: Vec<&str> = threads
        .iter()
        .filter(|t| !matches!(t.policy, 1 | 2 | 6))
        .filter(|t| t.cpus.as_ref().is_some_and(|c| c.iter().any(|cpu| k.isolated.contains(cpu))))
        .map(|t| t.name.as_str())
        .collect();
    if !others_on_isolated.is_empty() && !realtime.is_empty() {
        problems
            .push(format!("threads {} may run on the isolated CPUs beside the loop", others_on_isolated.join(", ")));
        fixes.push(format!("CPUAffinity={} in the unit", housekeeping(&k.online, &k.isolated)));
    }
    let value = about.join(", ");
    if problems.is_empty() {
        return check("service-process", Status::Pass, value, None);
    }
    fixes.dedup();
    check("service-process", Status::Warn, format!("{value} — {}", problems.join("; ")), Some(fixes.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systemd_limits_read_as_systemd_reads_them() {
        assert_eq!(unit_limit("infinity"), Some(None));
        assert_eq!(unit_limit("95"), Some(Some(95)));
        assert_eq!(unit_limit("64M"), Some(Some(64 << 20)));
        assert_eq!(unit_limit("8K:16K"), Some(Some(8 << 10)));
        assert_eq!(unit_limit("lots"), None);
    }

    #[test]
    fn a_unit_is_read_with_continuations_and_the_last_assignment_winning() {
        let mut unit = Unit::default();
        unit.parse(
            "[Unit]\nDescription=x\nLimitRTPRIO=1\n[Service]\nLimitRTPRIO=10\n# LimitRTPRIO=0\nExecStart=/usr/local/bin/\
             rtloop run \\\n  --cpu 3 --mlock\nLimitRTPRIO=95\n",
        );
        assert_eq!(unit.get("LimitRTPRIO"), Some("95"));
        assert_eq!(unit.program().as_deref(), Some("rtloop"));
        assert_eq!(unit.loop_cpus(), Some(vec![3]));
        assert!(unit.as_root());
        unit.parse("[Service]\nExecStart=\nExecStart=-/opt/robot/walker --cpu=2,3\nUser=robot\n");
        assert_eq!(unit.program().as_deref(), Some("walker"));
        assert_eq!(unit.loop_cpus(), Some(vec![2, 3]));
        assert!(!unit.as_root());
    }

    #[test]
    fn frequencies_read_as_people_write_them() {
        assert_eq!(hz_text(10_000_000), "10 MHz");
        assert_eq!(hz_text(125_000_000), "125 MHz");
        assert_eq!(hz_text(500_000), "500 kHz");
    }
}
