//! The doctor on machines it does not run on: `/proc`, `/sys`, `/dev` and `/etc` trees written
//! as a Raspberry Pi 4 set up as docs/robot.md says, a Raspberry Pi 5 fresh out of the box with
//! a pi3hat service installed, and a VM like this one. Each verdict asserted here is decided by
//! the tree alone, so these hold on any machine.

use rtloop_lab::doctor::{checks, run, BitTiming, CanLink, Check, Machine, Status, CHECK_NAMES};
use std::path::Path;

/// A machine's files below a temporary root.
struct Tree(tempfile::TempDir);

impl Tree {
    fn new() -> Tree {
        Tree(tempfile::tempdir().unwrap())
    }

    fn file(&self, path: &str, content: impl AsRef<[u8]>) -> &Tree {
        let full = self.0.path().join(path.trim_start_matches('/'));
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, content).unwrap();
        self
    }

    fn link(&self, path: &str, target: &str) -> &Tree {
        let full = self.0.path().join(path.trim_start_matches('/'));
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        // Two devices of one bus share its controller's link.
        if std::fs::symlink_metadata(&full).is_err() {
            std::os::unix::fs::symlink(target, full).unwrap();
        }
        self
    }

    fn root(&self) -> &Path {
        self.0.path()
    }

    /// What every Linux machine has, with `online` CPUs and `isolated` ones.
    fn linux(&self, release: &str, version: &str, cmdline: &str, online: &str, isolated: &str) -> &Tree {
        self.file("/proc/sys/kernel/osrelease", format!("{release}\n"))
            .file("/proc/sys/kernel/version", format!("{version}\n"))
            .file("/proc/cmdline", format!("{cmdline}\n"))
            .file("/sys/devices/system/cpu/online", format!("{online}\n"))
            .file("/sys/devices/system/cpu/isolated", format!("{isolated}\n"))
            .file("/proc/sys/kernel/sched_rt_period_us", "1000000\n")
            .file("/proc/swaps", "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n")
            .file("/sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n")
            .file("/dev/cpu_dma_latency", 0i32.to_ne_bytes())
            .file("/etc/group", "root:x:0:\nspi:x:999:robot\n")
    }

    /// The doctor's own process: root, or a user without real-time limits.
    fn own_process(&self, root: bool) -> &Tree {
        let uid = if root { "0" } else { "1000" };
        self.file(
            "/proc/self/status",
            format!(
                "Name:\trtloop\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nCapEff:\t{}\n",
                if root { "000001ffffffffff" } else { "0000000000000000" }
            ),
        )
        .file(
            "/proc/self/limits",
            "Limit                     Soft Limit           Hard Limit           Units     \n\
             Max locked memory         8388608              8388608              bytes     \n\
             Max realtime priority     0                    0                    \n",
        )
    }

    fn device_tree(&self, model: &str, compatible: &[&str]) -> &Tree {
        let mut c = Vec::new();
        for name in compatible {
            c.extend_from_slice(name.as_bytes());
            c.push(0);
        }
        self.file("/proc/device-tree/model", format!("{model}\0")).file("/proc/device-tree/compatible", c)
    }

    /// A spidev device `spidevB.C` whose device tree node allows `max_hz`, on a controller
    /// driven by `driver`.
    fn spidev(&self, bus: u32, cs: u32, max_hz: u32, driver: &str) -> &Tree {
        self.file(&format!("/sys/class/spidev/spidev{bus}.{cs}/device/of_node/spi-max-frequency"), max_hz.to_be_bytes())
            .file(&format!("/dev/spidev{bus}.{cs}"), "")
            .link(
                &format!("/sys/class/spi_master/spi{bus}/device/driver"),
                &format!("../../../bus/platform/drivers/{driver}"),
            )
    }

    fn can_interface(&self, name: &str) -> &Tree {
        self.file(&format!("/sys/class/net/{name}/type"), "280\n")
            .file(&format!("/sys/class/net/{name}/mtu"), "72\n")
            .file(&format!("/sys/class/net/{name}/operstate"), "up\n")
    }

    /// A running process `pid` named `name`: its main thread at normal priority, and, when
    /// given, a SCHED_FIFO thread `cycle` at `priority` on `cycle_cpus`.
    fn process(&self, pid: u32, name: &str, cycle: Option<(u32, &str)>) -> &Tree {
        self.file(&format!("/proc/{pid}/comm"), format!("{name}\n"))
            .file(
                &format!("/proc/{pid}/status"),
                format!("Name:\t{name}\nUid:\t999\t999\t999\t999\nCapEff:\t0000000000000000\nCpus_allowed_list:\t0-2\nVmLck:\t  61440 kB\n"),
            )
            .file(
                &format!("/proc/{pid}/limits"),
                "Limit                     Soft Limit           Hard Limit           Units     \n\
                 Max locked memory         unlimited            unlimited            bytes     \n\
                 Max realtime priority     95                   95                   \n",
            );
        self.thread(pid, pid, name, 0, 0, "0-2");
        if let Some((priority, cpus)) = cycle {
            self.thread(pid, pid + 6, "rtloop-cycle", priority, 1, cpus);
        }
        self
    }

    fn thread(&self, pid: u32, tid: u32, name: &str, priority: u32, policy: u32, cpus: &str) -> &Tree {
        // Fields 3 to 39 (state, then numbers), 40 the real-time priority, 41 the policy.
        let middle = vec!["0"; 36].join(" ");
        self.file(
            &format!("/proc/{pid}/task/{tid}/stat"),
            format!("{tid} ({name}) S {middle} {priority} {policy} 0 0 0\n"),
        )
        .file(&format!("/proc/{pid}/task/{tid}/status"), format!("Name:\t{name}\nCpus_allowed_list:\t{cpus}\n"))
    }
}

/// moteus's timing as `ip link` sets it on an MCP2518FD (40 MHz clock).
fn moteus_link(name: &str) -> CanLink {
    CanLink {
        name: name.into(),
        up: true,
        fd: Some(true),
        state: Some("ERROR-ACTIVE".into()),
        nominal: Some(BitTiming {
            bitrate: 1_000_000,
            sample_point_permille: 675,
            sjw: 10,
            phase_seg2: 13,
            sjw_max: Some(128),
        }),
        data: Some(BitTiming {
            bitrate: 5_000_000,
            sample_point_permille: 625,
            sjw: 3,
            phase_seg2: 3,
            sjw_max: Some(16),
        }),
        restart_ms: Some(1000),
        clock_hz: Some(40_000_000),
    }
}

/// A Raspberry Pi 4 with a pi3hat, set up as docs/robot.md says: PREEMPT_RT, CPU 3 isolated
/// and tickless with every IRQ elsewhere, SPI at the overlay's clock, can0 (a USB adapter) at
/// moteus's timing, the service installed and its loop running on CPU 3.
fn pi4() -> Tree {
    let t = Tree::new();
    t.linux(
        "6.6.74-rt48-v8+",
        "#1 SMP PREEMPT_RT Wed Feb  5 10:00:00 GMT 2025",
        "console=serial0,115200 root=PARTUUID=6c586e13-02 rootwait isolcpus=3 nohz_full=3 rcu_nocbs=3 irqaffinity=0-2",
        "0-3",
        "3",
    )
    .own_process(true)
    .file("/sys/kernel/realtime", "1\n")
    .file("/sys/devices/system/cpu/nohz_full", "3\n")
    .file("/proc/sys/kernel/sched_rt_runtime_us", "-1\n")
    .file("/proc/sys/kernel/timer_migration", "0\n")
    .file("/sys/devices/system/clocksource/clocksource0/current_clocksource", "arch_sys_counter\n")
    .file("/sys/devices/system/clocksource/clocksource0/available_clocksource", "arch_sys_counter \n")
    .file("/proc/irq/default_smp_affinity", "7\n")
    .file("/proc/irq/27/smp_affinity_list", "0-2\n")
    .file("/proc/irq/44/smp_affinity_list", "0-2\n")
    .file(
        "/proc/interrupts",
        "           CPU0       CPU1       CPU2       CPU3       \n\
          11:     123456      65432      43210      98765     GICv2  30 Level     arch_timer\n\
          27:       5000          0          0          0     GICv2 150 Level     fe204000.spi\n\
          44:        300         12          0          0     GICv2 125 Level     fe215080.spi\n\
         IPI0:       100        100        100          3       Rescheduling interrupts\n",
    );
    for cpu in 0..4 {
        t.file(&format!("/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor"), "performance\n");
    }
    t.device_tree("Raspberry Pi 4 Model B Rev 1.4", &["raspberrypi,4-model-b", "brcm,bcm2711"])
        .spidev(0, 0, 125_000_000, "spi-bcm2835")
        .spidev(1, 0, 125_000_000, "spi-bcm2835aux")
        .spidev(1, 1, 125_000_000, "spi-bcm2835aux")
        .file("/sys/module/spidev/parameters/bufsiz", "4096\n")
        .can_interface("can0")
        .file(
            "/etc/systemd/system/rtloop.service",
            "[Unit]\nDescription=rtloop\n\n[Service]\nUser=robot\nLimitRTPRIO=95\nLimitMEMLOCK=infinity\nCPUAffinity=0-2\n\
             ExecStart=/usr/local/bin/rtloop run --config /etc/rtloop/robot.toml \\\n    --bus 1=pi3hat:spidev --cpu 3 --mlock\n",
        )
        .process(812, "rtloop", Some((40, "3")));
    t
}

/// A Raspberry Pi 5 as it boots first, with the service of docs/robot.md copied without its
/// limits: Raspberry Pi OS's kernel (PREEMPT, not RT), no CPU isolated, only SPI0 enabled
/// (dtparam=spi=on, no spi1 overlay), a CAN adapter at a classic 500 kbit/s that went bus-off.
fn pi5() -> Tree {
    let t = Tree::new();
    t.linux(
        "6.6.51+rpt-rpi-2712",
        "#1 SMP PREEMPT Debian 1:6.6.51-1+rpt3 (2024-10-08)",
        "reboot=w coherent_pool=1M 8250.nr_uarts=1 console=ttyAMA10,115200 root=PARTUUID=2c3c4d5e-02 rootwait",
        "0-3",
        "",
    )
    .own_process(false)
    .file("/proc/sys/kernel/sched_rt_runtime_us", "950000\n")
    .file("/proc/sys/kernel/timer_migration", "1\n")
    .file("/sys/devices/system/clocksource/clocksource0/current_clocksource", "arch_sys_counter\n")
    .file("/proc/irq/default_smp_affinity", "f\n")
    .device_tree("Raspberry Pi 5 Model B Rev 1.0", &["raspberrypi,5-model-b", "brcm,bcm2712"])
    .spidev(0, 0, 125_000_000, "dw_spi_mmio")
    .can_interface("can0")
    .file(
        "/etc/systemd/system/rtloop.service",
        "[Service]\nUser=robot\nExecStart=/usr/local/bin/rtloop run --bus 1=pi3hat:spidev\n",
    );
    t
}

/// A VM like this one: no device tree, no cpufreq, no SPI or CAN, no service.
fn vm() -> Tree {
    let t = Tree::new();
    t.linux(
        "6.1.0-28-cloud-amd64",
        "#1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 (2024-11-22)",
        "BOOT_IMAGE=/boot/vmlinuz-6.1.0-28-cloud-amd64 root=UUID=0d6f ro console=ttyS0",
        "0-1",
        "",
    )
    .own_process(true)
    .file("/proc/sys/kernel/sched_rt_runtime_us", "950000\n")
    .file("/sys/devices/system/clocksource/clocksource0/current_clocksource", "kvm-clock\n")
    .file("/sys/devices/system/clocksource/clocksource0/available_clocksource", "kvm-clock tsc acpi_pm \n")
    .file("/sys/class/net/eth0/type", "1\n")
    .file("/sys/class/net/lo/type", "772\n");
    t
}

fn get<'a>(found: &'a [Check], name: &str) -> &'a Check {
    found.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no check {name}"))
}

fn fix(c: &Check) -> &str {
    c.fix.as_deref().unwrap_or_else(|| panic!("{} names no fix: {c:?}", c.name))
}

#[test]
fn a_pi4_set_up_as_the_guide_says_passes_the_robots_checks() {
    let t = pi4();
    let found = checks(&Machine::at(t.root()).with_can_links(vec![moteus_link("can0")]));
    assert_eq!(found.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), CHECK_NAMES);
    for name in [
        "preempt-rt",
        "preemption-model",
        "isolcpus",
        "nohz_full",
        "rcu_nocbs",
        "cpufreq-governor",
        "irq-affinity",
        "sched_rt_runtime_us",
        "rlimit-rtprio",
        "swap",
        "timer_migration",
        "clocksource",
        "spi",
        "can",
        "irq-landing",
        "service",
        "service-process",
    ] {
        assert_eq!(get(&found, name).status, Status::Pass, "{:?}", get(&found, name));
    }
    let machine = &get(&found, "machine").value;
    assert!(machine.contains("Raspberry Pi 4") && machine.contains("BCM283x"), "{machine}");
    let spi = &get(&found, "spi").value;
    for device in ["/dev/spidev0.0", "/dev/spidev1.0", "/dev/spidev1.1"] {
        assert!(spi.contains(device), "{spi}");
    }
    assert!(spi.contains("125 MHz") && spi.contains("spi-bcm2835aux"), "{spi}");
    let can = &get(&found, "can").value;
    assert!(
        can.contains("nominal 1000000 at 67.5 %") && can.contains("data 5000000") && can.contains("ERROR-ACTIVE"),
        "{can}"
    );
    let process = &get(&found, "service-process").value;
    assert!(
        process.contains("rtloop-cycle SCHED_FIFO 40 on CPUs 3") && process.contains("61440 KiB locked"),
        "{process}"
    );
}

#[test]
fn a_fresh_pi5_is_told_what_to_change_for_each_part() {
    let t = pi5();
    let mut slow = moteus_link("can0");
    slow.fd = Some(false);
    slow.nominal =
        Some(BitTiming { bitrate: 500_000, sample_point_permille: 875, sjw: 1, phase_seg2: 10, sjw_max: Some(128) });
    slow.data = None;
    slow.state = Some("BUS-OFF".into());
    slow.restart_ms = Some(0);
    let found = checks(&Machine::at(t.root()).with_can_links(vec![slow]));

    let rt = get(&found, "preempt-rt");
    assert_eq!(rt.status, Status::Warn);
    assert!(fix(rt).contains("Raspberry Pi kernel built with CONFIG_PREEMPT_RT"), "{rt:?}");
    let isol = get(&found, "isolcpus");
    assert_eq!(isol.status, Status::Warn);
    assert!(fix(isol).contains("isolcpus=1-3 nohz_full=1-3 rcu_nocbs=1-3"), "{isol:?}");
    assert_eq!(get(&found, "sched_rt_runtime_us").status, Status::Warn);
    assert_eq!(get(&found, "timer_migration").status, Status::Warn);
    assert_eq!(get(&found, "rlimit-rtprio").status, Status::Fail);

    // The pi3hat's SPI1 devices are missing; the value says what a Pi 5 needs.
    let spi = get(&found, "spi");
    assert_eq!(spi.status, Status::Warn, "{spi:?}");
    assert!(spi.value.contains("missing /dev/spidev1.0, /dev/spidev1.1"), "{spi:?}");
    assert!(spi.value.contains("RP1") && spi.value.contains("pi3hat:spidev only"), "{spi:?}");
    assert!(fix(spi).contains("dtoverlay=spi1-3cs") && fix(spi).contains("/boot/firmware/config.txt"), "{spi:?}");
    assert!(get(&found, "machine").value.contains("Raspberry Pi 5"));

    let can = get(&found, "can");
    assert_eq!(can.status, Status::Warn);
    for problem in [
        "CAN FD off",
        "nominal bitrate 500000 (moteus: 1000000)",
        "nominal sample point 87.5 %",
        "bus off",
        "restart-ms 0",
    ] {
        assert!(can.value.contains(problem), "{problem}: {can:?}");
    }
    for setting in [
        "ip link set can0 down",
        "bitrate 1000000 dbitrate 5000000",
        "sample-point 0.666",
        "dsample-point 0.666",
        "restart-ms 1000",
        "fd on",
    ] {
        assert!(fix(can).contains(setting), "{setting}: {can:?}");
    }

    // The unit runs as a user without LimitRTPRIO: SCHED_FIFO will be refused.
    let service = get(&found, "service");
    assert_eq!(service.status, Status::Fail, "{service:?}");
    assert!(fix(service).contains("LimitRTPRIO=95") && fix(service).contains("LimitMEMLOCK=infinity"), "{service:?}");
    assert_eq!(get(&found, "service-process").status, Status::Info);
    assert_eq!(get(&found, "irq-landing").status, Status::Info);
}

#[test]
fn interrupts_that_land_on_the_isolated_cpu_are_named_with_the_move() {
    let t = pi4();
    t.file(
        "/proc/interrupts",
        "           CPU0       CPU1       CPU2       CPU3       \n\
          11:     123456      65432      43210      98765     GICv2  30 Level     arch_timer\n\
          27:       5000          0          0         17     GICv2 150 Level     fe204000.spi\n",
    )
    .file("/proc/irq/27/smp_affinity_list", "0-3\n");
    let found = checks(&Machine::at(t.root()).with_can_links(vec![moteus_link("can0")]));
    let landing = get(&found, "irq-landing");
    assert_eq!(landing.status, Status::Warn);
    assert!(landing.value.contains("27 fe204000.spi (17)") && !landing.value.contains("arch_timer"), "{landing:?}");
    assert!(fix(landing).contains("echo 0-2 > /proc/irq/27/smp_affinity_list"), "{landing:?}");
    let affinity = get(&found, "irq-affinity");
    assert_eq!(affinity.status, Status::Warn);
    assert!(affinity.value.contains("IRQs 27 may land"), "{affinity:?}");
}

#[test]
fn a_loop_thread_off_the_isolated_cpu_and_a_service_without_cpu_affinity_are_flagged() {
    let t = pi4();
    t.file(
        "/etc/systemd/system/rtloop.service",
        "[Service]\nUser=robot\nLimitRTPRIO=95\nLimitMEMLOCK=64M\nExecStart=/usr/local/bin/rtloop run --cpu 2\n",
    )
    .thread(812, 818, "rtloop-cycle", 40, 1, "0-3");
    let found = checks(&Machine::at(t.root()).with_can_links(vec![moteus_link("can0")]));
    let service = get(&found, "service");
    assert_eq!(service.status, Status::Warn, "{service:?}");
    for problem in ["LimitMEMLOCK=64M", "no CPUAffinity", "--cpu 2 is not an isolated CPU"] {
        assert!(service.value.contains(problem), "{problem}: {service:?}");
    }
    assert!(fix(service).contains("CPUAffinity=0-2") && fix(service).contains("--cpu 3"), "{service:?}");
    let process = get(&found, "service-process");
    assert_eq!(process.status, Status::Warn);
    assert!(process.value.contains("rtloop-cycle may run on CPUs 0-3"), "{process:?}");
}

#[test]
fn a_can_interface_whose_timing_is_not_known_is_not_passed() {
    // A copied tree without netlink's answers: the doctor says where to run it instead.
    let t = pi4();
    let found = checks(&Machine::at(t.root()));
    let can = get(&found, "can");
    assert_eq!(can.status, Status::Info, "{can:?}");
    assert!(can.value.contains("run the doctor on the machine itself"), "{can:?}");
}

#[test]
fn a_vm_has_no_robot_parts_and_is_told_so_without_failing() {
    let t = vm();
    let found = checks(&Machine::at(t.root()));
    for name in ["machine", "spi", "can", "service", "service-process", "cpufreq-governor", "irq-landing"] {
        assert_eq!(get(&found, name).status, Status::Info, "{:?}", get(&found, name));
    }
    assert!(get(&found, "machine").value.contains("no device-tree model"));
    assert!(get(&found, "spi").fix.is_none(), "a VM is not told to enable a Pi's SPI");
    let cs = get(&found, "clocksource");
    assert_eq!(cs.status, Status::Warn);
    assert!(fix(cs).contains("echo tsc"), "{cs:?}");
    assert!(!found.iter().any(|c| c.status == Status::Fail), "{found:?}");
    // The JSON summary agrees with the table for a tree too.
    let out = run(&Machine::at(t.root()), true);
    let v: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(v["checks"].as_array().unwrap().len(), CHECK_NAMES.len());
}

#[test]
fn the_guide_the_fixes_point_to_says_what_they_say() {
    // The doctor's CAN fix and docs/robot.md give one timing; the fixes name its sections.
    let guide = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/robot.md")).unwrap();
    assert!(
        guide.contains(rtloop_io::socketcan::MOTEUS_CAN_TIMING),
        "docs/robot.md lacks moteus's timing as the doctor gives it"
    );
    for section in ["## 4. A PREEMPT_RT kernel", "## 7. SocketCAN"] {
        assert!(guide.contains(section), "docs/robot.md lacks {section}");
    }
    let t = pi5();
    let found = checks(&Machine::at(t.root()));
    assert!(fix(get(&found, "preempt-rt")).contains("docs/robot.md, \"A PREEMPT_RT kernel\""));
}
