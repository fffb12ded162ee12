/*
 * rtloop_agent.h — the rtloop spine/agent shared-memory protocol, for C11 agents.
 *
 * The spine (rtloop's real-time loop) creates /dev/shm/rtloop-NAME, publishes the robot's
 * state there every cycle, and applies the latest command this agent writes. Layout,
 * seqlock, liveness and arming are specified in docs/agent-protocol.md; this header is the
 * same layout (checked by _Static_assert, and by a test of the Rust crate that compares
 * these offsets with its own) plus inline helpers:
 *
 *   rtloop_agent_attach     open and check the segment, register this agent
 *   rtloop_agent_read_state copy the newest state out (seqlock reader)
 *   rtloop_agent_state_sequence the state's sequence now: unchanged = nothing new to read
 *   rtloop_agent_write_command  write a.command with the next heartbeat (seqlock writer),
 *                           and ring the spine's bell
 *   rtloop_agent_state_bell / rtloop_agent_sleep  sleep (no CPU) until a lockstep spine
 *                           has a state for this agent to answer (Linux futex)
 *   rtloop_agent_rearm      echo the spine's arm token when it waits to be armed
 *   rtloop_agent_spine_gone whether the spine ended, removed the segment or died, or the
 *                           segment was lost (truncated under the agent)
 *   rtloop_agent_segment_lost whether the segment was truncated (or replaced) under the agent
 *   rtloop_agent_detach     unregister and unmap
 *
 * The SIGBUS guard: any process of your user can truncate /dev/shm/rtloop-NAME while it is
 * mapped, and the next access past its new end raises SIGBUS, whose default action kills
 * the agent. rtloop_agent_attach therefore installs, once per process (per translation unit
 * that includes this header), a SIGBUS handler (SA_SIGINFO | SA_ONSTACK) that, for a fault
 * inside an attached segment, maps zero pages over that segment (one mmap, MAP_FIXED),
 * marks it lost and returns: the access reads zeros, and rtloop_agent_segment_lost (and so
 * rtloop_agent_spine_gone, which returns 4) says so. A fault anywhere else goes to the
 * handler that was installed before (or gets the default action), as without the guard.
 * Install your own SIGBUS handler before the first attach, if you have one, so the guard
 * chains to it; define RTLOOP_AGENT_NO_GUARD before including this header to do without
 * the guard (a truncated segment then kills the process with SIGBUS).
 *
 * Define _POSIX_C_SOURCE (200809L or later) before including any system header, or include
 * this header first. Needs glibc 2.34+ or -lrt for shm_open.
 */
#ifndef RTLOOP_AGENT_H
#define RTLOOP_AGENT_H

#if !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* Strict POSIX hides syscall(2); this is glibc's and musl's declaration. */
extern long syscall(long number, ...);

#define RTLOOP_AGENT_VERSION 4u
#define RTLOOP_MAX_SERVOS 32
#define RTLOOP_MAX_QPOS 64
#define RTLOOP_FIELD_COUNT 14
/* "RTLOOPAG" read as a little-endian uint64. */
#define RTLOOP_MAGIC 0x4741504F4F4C5452ull
#define RTLOOP_FROZEN_PREFIX 88

/* state.status */
enum {
    RTLOOP_STATUS_NONE = 0,
    RTLOOP_STATUS_WAITING = 1,   /* not armed yet: echo arm_token to arm */
    RTLOOP_STATUS_FOLLOWING = 2, /* commands are followed */
    RTLOOP_STATUS_SAFE = 3,      /* agent timed out: echo the new arm_token to re-arm */
    RTLOOP_STATUS_SHUTTING_DOWN = 4,
    RTLOOP_STATUS_ENDED = 5 /* the spine is gone: exit */
};

/* state.reset_result */
enum {
    RTLOOP_RESET_NONE = 0,        /* no reset asked for yet */
    RTLOOP_RESET_DONE = 1,        /* world back at its start pose, every servo stopped */
    RTLOOP_RESET_NO_PHYSICS = 2,  /* refused: the run has no physics world */
    RTLOOP_RESET_NOT_LOCKSTEP = 3, /* refused: the run is not lockstep */
    RTLOOP_RESET_BAD_DOMAIN = 4    /* refused: a value of command.domain out of its range */
};

/* command.domain.flags */
enum {
    RTLOOP_DOMAIN_APPLY = 1u /* the reset applies the domain's parameters; else the nominal world */
};

#define RTLOOP_MAX_LATENCY_CYCLES 32
#define RTLOOP_DOMAIN_PUSHES 4
#define RTLOOP_MAX_HOLD_CYCLES 100000

/* servo command kind */
enum {
    RTLOOP_KIND_QUERY = 0,
    RTLOOP_KIND_STOP = 1,
    RTLOOP_KIND_ZERO_VELOCITY = 2,
    RTLOOP_KIND_BRAKE = 3,
    RTLOOP_KIND_POSITION = 4
};

/* servo command `present` bits */
enum {
    RTLOOP_F_POSITION = 1u << 0,
    RTLOOP_F_VELOCITY = 1u << 1,
    RTLOOP_F_FEEDFORWARD_TORQUE = 1u << 2,
    RTLOOP_F_KP_SCALE = 1u << 3,
    RTLOOP_F_KD_SCALE = 1u << 4,
    RTLOOP_F_MAXIMUM_TORQUE = 1u << 5,
    RTLOOP_F_STOP_POSITION = 1u << 6,
    RTLOOP_F_WATCHDOG_TIMEOUT = 1u << 7,
    RTLOOP_F_VELOCITY_LIMIT = 1u << 8,
    RTLOOP_F_ACCEL_LIMIT = 1u << 9,
    RTLOOP_F_FIXED_VOLTAGE_OVERRIDE = 1u << 10,
    RTLOOP_F_ILIMIT_SCALE = 1u << 11,
    RTLOOP_F_FIXED_CURRENT_OVERRIDE = 1u << 12,
    RTLOOP_F_IGNORE_POSITION_BOUNDS = 1u << 13
};

typedef struct {
    uint32_t id;
    uint32_t bus;
} rtloop_servo_info;

typedef struct {
    uint64_t magic; /* accessed atomically */
    uint32_t version;
    uint32_t header_size;
    uint32_t state_offset;
    uint32_t state_size;
    uint32_t command_offset;
    uint32_t command_size;
    uint64_t total_size;
    uint32_t max_servos;
    uint32_t servo_count;
    double rate_hz;
    uint64_t period_ns;
    uint64_t timeout_ns;
    uint32_t lockstep;
    int32_t spine_pid;
    int32_t agent_pid;      /* accessed atomically */
    uint32_t agent_version; /* accessed atomically */
    uint32_t state_bell;    /* spine -> agent bell (futex word); accessed atomically */
    uint32_t agent_waiting; /* agents sleeping on state_bell; accessed atomically */
    uint32_t command_bell;  /* agent -> spine bell (futex word); accessed atomically */
    uint32_t spine_waiting; /* 1 while the spine sleeps on command_bell; accessed atomically */
    uint8_t reserved[24];
    rtloop_servo_info servos[RTLOOP_MAX_SERVOS];
} rtloop_header;

typedef struct {
    uint32_t present;
    uint32_t reserved;
    double quaternion[4]; /* w, x, y, z */
    double rate_dps[3];
    double accel_mps2[3];
} rtloop_imu;

typedef struct {
    uint32_t present; /* 1: a simulated body (rtloop run --physics) */
    uint32_t fallen;  /* 1 from a fall until upright again ([safety] fall_tilt_deg) */
    double height_m;      /* above the ground, m */
    double roll_deg;      /* right side down positive */
    double pitch_deg;     /* nose up positive */
    double quaternion[4]; /* w, x, y, z, pi3hat frame */
    double position_m[3]; /* ground frame: +x forward, +y left, +z up, m */
    double velocity_mps[3];
    double yaw_deg; /* heading, positive turning left */
    uint64_t reserved2;
} rtloop_body;

/* The body's whole pose: MuJoCo's qpos, as the model holds it (physics runs only). */
typedef struct {
    uint32_t nq; /* slots of qpos in use; 0: no body, or a model with more than RTLOOP_MAX_QPOS */
    uint32_t reserved;
    double qpos[RTLOOP_MAX_QPOS]; /* NaN past nq */
} rtloop_pose;

typedef struct {
    int32_t mode;  /* -1: absent */
    int32_t fault; /* -1: absent */
    uint8_t fresh;
    uint8_t reserved[7];
    int64_t request_cycle; /* -1: never answered */
    int64_t age_cycles;    /* -1: never answered */
    double position;       /* NaN: absent */
    double velocity;
    double torque;
    double q_current;
    double d_current;
    double motor_temperature;
    double temperature;
    double voltage;
} rtloop_servo_state;

typedef struct {
    uint64_t seq; /* seqlock; accessed atomically */
    uint64_t cycle;
    uint64_t time_ns;
    uint64_t stamp_ns;
    uint32_t status;
    uint32_t servo_count;
    uint64_t timeouts;
    uint64_t rearms;
    uint64_t arm_token;
    uint64_t rejected;
    uint64_t torn;
    rtloop_imu imu;
    uint64_t reset_ack;    /* the last command reset_request answered */
    uint32_t reset_result; /* RTLOOP_RESET_* */
    uint32_t awaiting;     /* 1: the spine waits for a command answering this state (lockstep) */
    uint64_t resets;       /* resets done so far */
    rtloop_body body;
    rtloop_servo_state servos[RTLOOP_MAX_SERVOS];
    rtloop_pose pose;
    uint8_t reserved2[56];
} rtloop_state;

typedef struct {
    uint32_t kind;
    uint32_t present;
    double position; /* NaN: hold the current position */
    double velocity;
    double feedforward_torque;
    double kp_scale;
    double kd_scale;
    double maximum_torque;
    double stop_position;
    double watchdog_timeout;
    double velocity_limit;
    double accel_limit;
    double fixed_voltage_override;
    double ilimit_scale;
    double fixed_current_override;
    double ignore_position_bounds;
} rtloop_servo_command;

typedef struct {
    double at_s;       /* seconds after the reset */
    double duration_s; /* 0: no push in this slot */
    double force_n[3]; /* ground frame: +x forward, +y left, +z up */
} rtloop_push;

/* The physical parameters a reset gives the simulated world (docs/agent-protocol.md section 9). */
typedef struct {
    uint32_t flags; /* RTLOOP_DOMAIN_APPLY, or 0: the nominal world */
    uint32_t latency_cycles;
    double friction_scale;
    double mass_scale;
    double payload_kg;
    double kp_scale[RTLOOP_MAX_SERVOS];
    double kd_scale[RTLOOP_MAX_SERVOS];
    double joint_offset_rad[RTLOOP_MAX_SERVOS];
    double joint_velocity_rad_s[RTLOOP_MAX_SERVOS];
    rtloop_push pushes[RTLOOP_DOMAIN_PUSHES];
} rtloop_domain;

typedef struct {
    uint64_t seq; /* seqlock; accessed atomically */
    uint64_t for_cycle;
    uint64_t heartbeat;
    uint64_t arm_token;
    uint32_t servo_count;
    uint32_t hold_cycles;   /* lockstep: cycles this command answers from for_cycle (0, 1: one) */
    uint64_t reset_request; /* differs from state.reset_ack: reset the simulated world */
    uint64_t reset_seed;    /* 0: the start pose exactly */
    uint8_t reserved[8];
    rtloop_servo_command servos[RTLOOP_MAX_SERVOS];
    rtloop_domain domain; /* read with a reset request */
} rtloop_command;

#define RTLOOP_STATE_OFFSET 384
#define RTLOOP_COMMAND_OFFSET 4352
#define RTLOOP_TOTAL_SIZE 9472

_Static_assert(sizeof(rtloop_servo_info) == 8, "layout");
_Static_assert(sizeof(rtloop_header) == 384, "layout");
_Static_assert(sizeof(rtloop_imu) == 88, "layout");
_Static_assert(sizeof(rtloop_body) == 128, "layout");
_Static_assert(sizeof(rtloop_servo_state) == 96, "layout");
_Static_assert(sizeof(rtloop_pose) == 520, "layout");
_Static_assert(sizeof(rtloop_state) == 3968, "layout");
_Static_assert(sizeof(rtloop_servo_command) == 120, "layout");
_Static_assert(sizeof(rtloop_push) == 40, "layout");
_Static_assert(sizeof(rtloop_domain) == 1216, "layout");
_Static_assert(sizeof(rtloop_command) == 5120, "layout");
_Static_assert(sizeof(_Atomic uint64_t) == 8 && alignof(_Atomic uint64_t) == 8, "64-bit atomics");
_Static_assert(sizeof(_Atomic int32_t) == 4 && sizeof(_Atomic uint32_t) == 4, "32-bit atomics");

/* Every offset; a Rust test compares these lines with the crate's layout. */
_Static_assert(offsetof(rtloop_servo_info, id) == 0, "layout");
_Static_assert(offsetof(rtloop_servo_info, bus) == 4, "layout");
_Static_assert(offsetof(rtloop_header, magic) == 0, "layout");
_Static_assert(offsetof(rtloop_header, version) == 8, "layout");
_Static_assert(offsetof(rtloop_header, header_size) == 12, "layout");
_Static_assert(offsetof(rtloop_header, state_offset) == 16, "layout");
_Static_assert(offsetof(rtloop_header, state_size) == 20, "layout");
_Static_assert(offsetof(rtloop_header, command_offset) == 24, "layout");
_Static_assert(offsetof(rtloop_header, command_size) == 28, "layout");
_Static_assert(offsetof(rtloop_header, total_size) == 32, "layout");
_Static_assert(offsetof(rtloop_header, max_servos) == 40, "layout");
_Static_assert(offsetof(rtloop_header, servo_count) == 44, "layout");
_Static_assert(offsetof(rtloop_header, rate_hz) == 48, "layout");
_Static_assert(offsetof(rtloop_header, period_ns) == 56, "layout");
_Static_assert(offsetof(rtloop_header, timeout_ns) == 64, "layout");
_Static_assert(offsetof(rtloop_header, lockstep) == 72, "layout");
_Static_assert(offsetof(rtloop_header, spine_pid) == 76, "layout");
_Static_assert(offsetof(rtloop_header, agent_pid) == 80, "layout");
_Static_assert(offsetof(rtloop_header, agent_version) == 84, "layout");
_Static_assert(offsetof(rtloop_header, state_bell) == 88, "layout");
_Static_assert(offsetof(rtloop_header, agent_waiting) == 92, "layout");
_Static_assert(offsetof(rtloop_header, command_bell) == 96, "layout");
_Static_assert(offsetof(rtloop_header, spine_waiting) == 100, "layout");
_Static_assert(offsetof(rtloop_header, reserved) == 104, "layout");
_Static_assert(offsetof(rtloop_header, servos) == 128, "layout");
_Static_assert(offsetof(rtloop_imu, present) == 0, "layout");
_Static_assert(offsetof(rtloop_imu, reserved) == 4, "layout");
_Static_assert(offsetof(rtloop_imu, quaternion) == 8, "layout");
_Static_assert(offsetof(rtloop_imu, rate_dps) == 40, "layout");
_Static_assert(offsetof(rtloop_imu, accel_mps2) == 64, "layout");
_Static_assert(offsetof(rtloop_body, present) == 0, "layout");
_Static_assert(offsetof(rtloop_body, fallen) == 4, "layout");
_Static_assert(offsetof(rtloop_body, height_m) == 8, "layout");
_Static_assert(offsetof(rtloop_body, roll_deg) == 16, "layout");
_Static_assert(offsetof(rtloop_body, pitch_deg) == 24, "layout");
_Static_assert(offsetof(rtloop_body, quaternion) == 32, "layout");
_Static_assert(offsetof(rtloop_body, position_m) == 64, "layout");
_Static_assert(offsetof(rtloop_body, velocity_mps) == 88, "layout");
_Static_assert(offsetof(rtloop_body, yaw_deg) == 112, "layout");
_Static_assert(offsetof(rtloop_body, reserved2) == 120, "layout");
_Static_assert(offsetof(rtloop_servo_state, mode) == 0, "layout");
_Static_assert(offsetof(rtloop_servo_state, fault) == 4, "layout");
_Static_assert(offsetof(rtloop_servo_state, fresh) == 8, "layout");
_Static_assert(offsetof(rtloop_servo_state, reserved) == 9, "layout");
_Static_assert(offsetof(rtloop_servo_state, request_cycle) == 16, "layout");
_Static_assert(offsetof(rtloop_servo_state, age_cycles) == 24, "layout");
_Static_assert(offsetof(rtloop_servo_state, position) == 32, "layout");
_Static_assert(offsetof(rtloop_servo_state, velocity) == 40, "layout");
_Static_assert(offsetof(rtloop_servo_state, torque) == 48, "layout");
_Static_assert(offsetof(rtloop_servo_state, q_current) == 56, "layout");
_Static_assert(offsetof(rtloop_servo_state, d_current) == 64, "layout");
_Static_assert(offsetof(rtloop_servo_state, motor_temperature) == 72, "layout");
_Static_assert(offsetof(rtloop_servo_state, temperature) == 80, "layout");
_Static_assert(offsetof(rtloop_servo_state, voltage) == 88, "layout");
_Static_assert(offsetof(rtloop_state, seq) == 0, "layout");
_Static_assert(offsetof(rtloop_state, cycle) == 8, "layout");
_Static_assert(offsetof(rtloop_state, time_ns) == 16, "layout");
_Static_assert(offsetof(rtloop_state, stamp_ns) == 24, "layout");
_Static_assert(offsetof(rtloop_state, status) == 32, "layout");
_Static_assert(offsetof(rtloop_state, servo_count) == 36, "layout");
_Static_assert(offsetof(rtloop_state, timeouts) == 40, "layout");
_Static_assert(offsetof(rtloop_state, rearms) == 48, "layout");
_Static_assert(offsetof(rtloop_state, arm_token) == 56, "layout");
_Static_assert(offsetof(rtloop_state, rejected) == 64, "layout");
_Static_assert(offsetof(rtloop_state, torn) == 72, "layout");
_Static_assert(offsetof(rtloop_state, imu) == 80, "layout");
_Static_assert(offsetof(rtloop_state, reset_ack) == 168, "layout");
_Static_assert(offsetof(rtloop_state, reset_result) == 176, "layout");
_Static_assert(offsetof(rtloop_state, awaiting) == 180, "layout");
_Static_assert(offsetof(rtloop_state, resets) == 184, "layout");
_Static_assert(offsetof(rtloop_state, body) == 192, "layout");
_Static_assert(offsetof(rtloop_state, servos) == 320, "layout");
_Static_assert(offsetof(rtloop_state, pose) == 3392, "layout");
_Static_assert(offsetof(rtloop_state, reserved2) == 3912, "layout");
_Static_assert(offsetof(rtloop_pose, nq) == 0, "layout");
_Static_assert(offsetof(rtloop_pose, reserved) == 4, "layout");
_Static_assert(offsetof(rtloop_pose, qpos) == 8, "layout");
_Static_assert(offsetof(rtloop_servo_command, kind) == 0, "layout");
_Static_assert(offsetof(rtloop_servo_command, present) == 4, "layout");
_Static_assert(offsetof(rtloop_servo_command, position) == 8, "layout");
_Static_assert(offsetof(rtloop_servo_command, velocity) == 16, "layout");
_Static_assert(offsetof(rtloop_servo_command, feedforward_torque) == 24, "layout");
_Static_assert(offsetof(rtloop_servo_command, kp_scale) == 32, "layout");
_Static_assert(offsetof(rtloop_servo_command, kd_scale) == 40, "layout");
_Static_assert(offsetof(rtloop_servo_command, maximum_torque) == 48, "layout");
_Static_assert(offsetof(rtloop_servo_command, stop_position) == 56, "layout");
_Static_assert(offsetof(rtloop_servo_command, watchdog_timeout) == 64, "layout");
_Static_assert(offsetof(rtloop_servo_command, velocity_limit) == 72, "layout");
_Static_assert(offsetof(rtloop_servo_command, accel_limit) == 80, "layout");
_Static_assert(offsetof(rtloop_servo_command, fixed_voltage_override) == 88, "layout");
_Static_assert(offsetof(rtloop_servo_command, ilimit_scale) == 96, "layout");
_Static_assert(offsetof(rtloop_servo_command, fixed_current_override) == 104, "layout");
_Static_assert(offsetof(rtloop_servo_command, ignore_position_bounds) == 112, "layout");
_Static_assert(offsetof(rtloop_command, seq) == 0, "layout");
_Static_assert(offsetof(rtloop_command, for_cycle) == 8, "layout");
_Static_assert(offsetof(rtloop_command, heartbeat) == 16, "layout");
_Static_assert(offsetof(rtloop_command, arm_token) == 24, "layout");
_Static_assert(offsetof(rtloop_command, servo_count) == 32, "layout");
_Static_assert(offsetof(rtloop_command, hold_cycles) == 36, "layout");
_Static_assert(offsetof(rtloop_command, reset_request) == 40, "layout");
_Static_assert(offsetof(rtloop_command, reset_seed) == 48, "layout");
_Static_assert(offsetof(rtloop_command, reserved) == 56, "layout");
_Static_assert(offsetof(rtloop_command, servos) == 64, "layout");
_Static_assert(offsetof(rtloop_command, domain) == 3904, "layout");
_Static_assert(offsetof(rtloop_push, at_s) == 0, "layout");
_Static_assert(offsetof(rtloop_push, duration_s) == 8, "layout");
_Static_assert(offsetof(rtloop_push, force_n) == 16, "layout");
_Static_assert(offsetof(rtloop_domain, flags) == 0, "layout");
_Static_assert(offsetof(rtloop_domain, latency_cycles) == 4, "layout");
_Static_assert(offsetof(rtloop_domain, friction_scale) == 8, "layout");
_Static_assert(offsetof(rtloop_domain, mass_scale) == 16, "layout");
_Static_assert(offsetof(rtloop_domain, payload_kg) == 24, "layout");
_Static_assert(offsetof(rtloop_domain, kp_scale) == 32, "layout");
_Static_assert(offsetof(rtloop_domain, kd_scale) == 288, "layout");
_Static_assert(offsetof(rtloop_domain, joint_offset_rad) == 544, "layout");
_Static_assert(offsetof(rtloop_domain, joint_velocity_rad_s) == 800, "layout");
_Static_assert(offsetof(rtloop_domain, pushes) == 1056, "layout");

/* An attached agent. `command` is the agent's own copy: fill it, then write it. */
typedef struct {
    int fd;
    unsigned char *map; /* the segment, RTLOOP_TOTAL_SIZE bytes */
    rtloop_header header; /* copied at attach */
    rtloop_command command;
    uint64_t command_seq; /* the writer's own sequence count (even) */
    int32_t pid;
    int guard_slot; /* the segment's slot in the SIGBUS guard's table, -1 for none */
} rtloop_agent;

/* ---- The SIGBUS guard (see the top of this file) ---- */

#if defined(MAP_ANONYMOUS)
#define RTLOOP__MAP_ANONYMOUS MAP_ANONYMOUS
#elif defined(__linux__) && (defined(__x86_64__) || defined(__i386__) || defined(__aarch64__) || defined(__arm__) || \
                             defined(__riscv) || defined(__powerpc__) || defined(__s390__))
/* Strict POSIX hides MAP_ANONYMOUS; this is Linux's value on these architectures. */
#define RTLOOP__MAP_ANONYMOUS 0x20
#else
#error "define _DEFAULT_SOURCE before including rtloop_agent.h, so that <sys/mman.h> defines MAP_ANONYMOUS"
#endif

/* SA_ONSTACK is XSI: strict POSIX may hide it (the guard then runs on the faulting stack). */
#if defined(SA_ONSTACK)
#define RTLOOP__SA_ONSTACK SA_ONSTACK
#else
#define RTLOOP__SA_ONSTACK 0
#endif

/* Segments one process (translation unit) can have attached at once. */
#define RTLOOP_GUARD_SLOTS 16

typedef struct {
    _Atomic uintptr_t start; /* 0: free; UINTPTR_MAX: being filled in */
    _Atomic size_t len;
    _Atomic int lost;
} rtloop__guard_slot;

static rtloop__guard_slot rtloop__guard_slots[RTLOOP_GUARD_SLOTS];
static struct sigaction rtloop__guard_previous; /* written once, before the handler exists */
static _Atomic int rtloop__guard_state;         /* 0 not yet, 1 installing, 2 installed, 3 failed */

/* Hand a fault that is not a segment's to the handler installed before, or take the
 * default action (the process ends with SIGBUS), as without the guard. */
static inline void rtloop__guard_chain(int sig, siginfo_t *info, void *context) {
    const struct sigaction *p = &rtloop__guard_previous;
    if (p->sa_flags & SA_SIGINFO) {
        p->sa_sigaction(sig, info, context);
        return;
    }
    if (p->sa_handler == SIG_IGN && info->si_code <= 0) {
        return; /* a SIGBUS someone sent (kill), ignored as before */
    }
    if (p->sa_handler == SIG_DFL || p->sa_handler == SIG_IGN) {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(SIGBUS, &dfl, NULL);
        raise(sig); /* blocked while the handler runs: delivered, by default, on return */
        return;
    }
    p->sa_handler(sig);
}

/* The handler: async-signal-safe (atomics, mmap, sigaction, raise only). */
static inline void rtloop__guard_on_sigbus(int sig, siginfo_t *info, void *context) {
    uintptr_t addr = (uintptr_t)info->si_addr;
    for (int i = 0; i < RTLOOP_GUARD_SLOTS; i++) {
        rtloop__guard_slot *s = &rtloop__guard_slots[i];
        uintptr_t start = atomic_load_explicit(&s->start, memory_order_acquire);
        if (start == 0 || start == UINTPTR_MAX) {
            continue;
        }
        size_t len = atomic_load_explicit(&s->len, memory_order_relaxed);
        if (addr < start || addr - start >= len) {
            continue;
        }
        int saved = errno;
        void *p = mmap((void *)start, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | RTLOOP__MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        errno = saved;
        if (p != MAP_FAILED) {
            atomic_store_explicit(&s->lost, 1, memory_order_release);
            return;
        }
        break;
    }
    rtloop__guard_chain(sig, info, context);
}

/* Install the handler once; 0 when it is in place. */
static inline int rtloop__guard_install(void) {
    int expected = 0;
    if (atomic_compare_exchange_strong(&rtloop__guard_state, &expected, 1)) {
        struct sigaction action;
        int ok = sigaction(SIGBUS, NULL, &rtloop__guard_previous) == 0;
        if (ok) {
            memset(&action, 0, sizeof action);
            action.sa_sigaction = rtloop__guard_on_sigbus;
            action.sa_flags = SA_SIGINFO | RTLOOP__SA_ONSTACK;
            sigemptyset(&action.sa_mask);
            ok = sigaction(SIGBUS, &action, NULL) == 0;
        }
        atomic_store(&rtloop__guard_state, ok ? 2 : 3);
    }
    int state;
    while ((state = atomic_load(&rtloop__guard_state)) == 1) {
    }
    return state == 2 ? 0 : -1;
}

/* Guard [start, start + len): a slot index, or -1 (the table is full, or no handler). */
static inline int rtloop__guard_register(void *start, size_t len) {
#ifdef RTLOOP_AGENT_NO_GUARD
    (void)start;
    (void)len;
    return -1;
#else
    if (rtloop__guard_install() != 0) {
        return -1;
    }
    for (int i = 0; i < RTLOOP_GUARD_SLOTS; i++) {
        rtloop__guard_slot *s = &rtloop__guard_slots[i];
        uintptr_t expected = 0;
        if (atomic_compare_exchange_strong(&s->start, &expected, UINTPTR_MAX)) {
            atomic_store_explicit(&s->len, len, memory_order_relaxed);
            atomic_store_explicit(&s->lost, 0, memory_order_relaxed);
            atomic_store_explicit(&s->start, (uintptr_t)start, memory_order_release);
            return i;
        }
    }
    return -1;
#endif
}

static inline void rtloop__guard_release(int slot) {
    if (slot >= 0 && slot < RTLOOP_GUARD_SLOTS) {
        atomic_store_explicit(&rtloop__guard_slots[slot].start, (uintptr_t)0, memory_order_release);
    }
}

/* Return codes of rtloop_agent_attach. */
enum {
    RTLOOP_OK = 0,
    RTLOOP_RETRY = 1, /* no spine yet, or still starting: try again shortly */
    RTLOOP_ERROR = 2  /* refused: `err` says why */
};

#define RTLOOP_READ_TRIES 100000

static inline _Atomic uint64_t *rtloop__seq(void *block) {
    return (_Atomic uint64_t *)block;
}

/* Seqlock reader: copy the block of `words` 8-byte words at `src` to `dst`. Returns 0, or
 * -1 if the writer was mid-write on every try. The payload is copied through volatile
 * loads between the acquire load of seq and an acquire fence; see the protocol doc. */
static inline int rtloop__read(const void *src, void *dst, size_t words, long tries) {
    _Atomic uint64_t *seq = rtloop__seq((void *)src);
    const volatile uint64_t *s = (const volatile uint64_t *)src;
    uint64_t *d = (uint64_t *)dst;
    for (long t = 0; t < tries; t++) {
        uint64_t s1 = atomic_load_explicit(seq, memory_order_acquire);
        if (s1 & 1u) {
            continue;
        }
        for (size_t i = 1; i < words; i++) {
            d[i] = s[i];
        }
        atomic_thread_fence(memory_order_acquire);
        uint64_t s2 = atomic_load_explicit(seq, memory_order_relaxed);
        if (s1 == s2) {
            d[0] = s1;
            return 0;
        }
    }
    return -1;
}

/* Seqlock writer: `*count` is the writer's own (even) sequence. */
static inline void rtloop__write(void *dst, const void *src, size_t words, uint64_t *count) {
    _Atomic uint64_t *seq = rtloop__seq(dst);
    volatile uint64_t *d = (volatile uint64_t *)dst;
    const uint64_t *s = (const uint64_t *)src;
    uint64_t n = *count & ~(uint64_t)1;
    atomic_store_explicit(seq, n + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    for (size_t i = 1; i < words; i++) {
        d[i] = s[i];
    }
    atomic_store_explicit(seq, n + 2, memory_order_release);
    *count = n + 2;
}

static inline int rtloop__name_ok(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > 64) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        int ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
        if (!ok) {
            return 0;
        }
    }
    return 1;
}

/* Whether process `pid` is gone: kill(pid, 0) fails with ESRCH, or it is a zombie (it exited
 * and its parent has not reaped it: kill still succeeds then). */
static inline int rtloop__pid_dead(int32_t pid) {
    if (pid <= 0) {
        return 0;
    }
    if (kill((pid_t)pid, 0) != 0) {
        return errno == ESRCH;
    }
    char path[32], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return errno == ENOENT;
    }
    ssize_t got = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (got <= 0) {
        return 0;
    }
    buf[got] = 0;
    const char *close_paren = strrchr(buf, ')'); /* "PID (NAME) STATE ...", NAME may hold ')' */
    return close_paren != NULL && (close_paren[1] == ' ') && (close_paren[2] == 'Z' || close_paren[2] == 'X');
}

/* ---- Bells: the lockstep hand-off without busy-polling (Linux futex on the header) ---- */

static inline _Atomic uint32_t *rtloop__header_word(const rtloop_agent *a, size_t offset) {
    return (_Atomic uint32_t *)(void *)(a->map + offset);
}

/* Add 1 to `bell`; wake its sleepers when `sleepers` says there are some. */
static inline void rtloop__ring(_Atomic uint32_t *bell, _Atomic uint32_t *sleepers) {
    atomic_fetch_add(bell, 1u);
    if (atomic_load(sleepers) != 0) {
        syscall(SYS_futex, (uint32_t *)(void *)bell, 1 /* FUTEX_WAKE */, 0x7fffffff, NULL, NULL, 0);
    }
}

/* Attach to /dev/shm/rtloop-NAME. On RTLOOP_RETRY or RTLOOP_ERROR, `err` holds one sentence. */
static inline int rtloop_agent_attach(rtloop_agent *a, const char *name, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    a->fd = -1;
    a->guard_slot = -1;
    if (!rtloop__name_ok(name)) {
        snprintf(err, errlen, "agent name \"%s\" is invalid: use 1 to 64 characters from A-Z, a-z, 0-9, '_' and '-'",
                 name);
        return RTLOOP_ERROR;
    }
    char path[80];
    snprintf(path, sizeof path, "/rtloop-%s", name);
    /* O_NONBLOCK: /dev/shm is world-writable, and a FIFO planted under this name must be
     * refused below, not waited on. It changes nothing for the regular file a spine makes. */
    int fd = shm_open(path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT) {
            snprintf(err, errlen,
                     "no spine is running with agent name %s (/dev/shm/rtloop-%s does not exist); start `rtloop run --agent %s` first",
                     name, name, name);
            return RTLOOP_RETRY;
        }
        snprintf(err, errlen, "cannot open /dev/shm/rtloop-%s: %s", name, strerror(e));
        return RTLOOP_ERROR;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "cannot inspect /dev/shm/rtloop-%s: %s", name, strerror(errno));
        close(fd);
        return RTLOOP_ERROR;
    }
    if (!S_ISREG(st.st_mode)) {
        const char *what = S_ISFIFO(st.st_mode)  ? "is a FIFO (named pipe), not a regular file"
                           : S_ISDIR(st.st_mode)  ? "is a directory, not a regular file"
                           : S_ISSOCK(st.st_mode) ? "is a socket, not a regular file"
                           : S_ISCHR(st.st_mode)  ? "is a character device, not a regular file"
                           : S_ISBLK(st.st_mode)  ? "is a block device, not a regular file"
                                                  : "is not a regular file";
        snprintf(err, errlen, "/dev/shm/rtloop-%s %s; remove it if it is yours, or use another agent name", name, what);
        close(fd);
        return RTLOOP_ERROR;
    }
    /* Another user's file is never a segment of a spine of ours (a spine makes its own, mode
     * 0600): refused before anything is read from it or written into it. */
    if (st.st_uid != geteuid()) {
        char owner[96];
        struct passwd pw, *found = NULL;
        char buf[1024];
        if (getpwuid_r(st.st_uid, &pw, buf, sizeof buf, &found) == 0 && found != NULL && pw.pw_name != NULL) {
            snprintf(owner, sizeof owner, "user %.48s (uid %lu)", pw.pw_name, (unsigned long)st.st_uid);
        } else {
            snprintf(owner, sizeof owner, "uid %lu", (unsigned long)st.st_uid);
        }
        snprintf(err, errlen,
                 "/dev/shm/rtloop-%s belongs to %s, not to this agent's user (uid %lu); attach only to a spine your own user runs, or use another agent name",
                 name, owner, (unsigned long)geteuid());
        close(fd);
        return RTLOOP_ERROR;
    }
    if (st.st_size == 0) {
        snprintf(err, errlen, "the spine is still creating /dev/shm/rtloop-%s; retry in a moment", name);
        close(fd);
        return RTLOOP_RETRY;
    }
    if (st.st_size < RTLOOP_FROZEN_PREFIX) {
        snprintf(err, errlen, "/dev/shm/rtloop-%s is %lld bytes, smaller than an rtloop agent segment (%d); check the agent name",
                 name, (long long)st.st_size, RTLOOP_TOTAL_SIZE);
        close(fd);
        return RTLOOP_ERROR;
    }
    size_t len = (size_t)st.st_size < RTLOOP_TOTAL_SIZE ? (size_t)st.st_size : RTLOOP_TOTAL_SIZE;
    void *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        snprintf(err, errlen, "cannot map /dev/shm/rtloop-%s: %s", name, strerror(errno));
        close(fd);
        return RTLOOP_ERROR;
    }
    /* Guarded from here on: a file that shrinks under the mapping cannot kill the agent. */
    a->guard_slot = rtloop__guard_register(map, len);
#ifndef RTLOOP_AGENT_NO_GUARD
    if (a->guard_slot < 0) {
        snprintf(err, errlen,
                 "cannot guard /dev/shm/rtloop-%s against SIGBUS: %d segments are attached already, or sigaction failed; detach one first",
                 name, RTLOOP_GUARD_SLOTS);
        munmap(map, len);
        close(fd);
        return RTLOOP_ERROR;
    }
#endif
    rtloop_header *h = (rtloop_header *)map;
    int rc = RTLOOP_ERROR;
    uint64_t magic = atomic_load_explicit((_Atomic uint64_t *)&h->magic, memory_order_acquire);
    if (magic == 0) {
        snprintf(err, errlen, "the spine is still creating /dev/shm/rtloop-%s; retry in a moment", name);
        rc = RTLOOP_RETRY;
        goto fail;
    }
    if (magic != RTLOOP_MAGIC) {
        snprintf(err, errlen, "/dev/shm/rtloop-%s is not an rtloop agent segment (wrong magic); check the agent name", name);
        goto fail;
    }
    /* Say which version we speak before checking theirs, so the spine can report it. */
    atomic_store_explicit((_Atomic uint32_t *)&h->agent_version, RTLOOP_AGENT_VERSION, memory_order_relaxed);
    uint32_t version = atomic_load_explicit((_Atomic uint32_t *)&h->version, memory_order_relaxed);
    if (version != RTLOOP_AGENT_VERSION) {
        snprintf(err, errlen,
                 "the spine speaks protocol version %u, this agent %u; rebuild the agent against the spine's rtloop_agent.h",
                 version, RTLOOP_AGENT_VERSION);
        goto fail;
    }
    if (len < RTLOOP_TOTAL_SIZE) {
        snprintf(err, errlen, "/dev/shm/rtloop-%s is %lld bytes, smaller than an rtloop agent segment (%d); check the agent name",
                 name, (long long)st.st_size, RTLOOP_TOTAL_SIZE);
        goto fail;
    }
    {
        const volatile uint64_t *src = (const volatile uint64_t *)map;
        uint64_t *dst = (uint64_t *)&a->header;
        for (size_t i = 0; i < sizeof(rtloop_header) / 8; i++) {
            dst[i] = src[i];
        }
    }
    atomic_thread_fence(memory_order_acquire);
    {
        const char *what = NULL;
        uint64_t theirs = 0, ours = 0;
#define RTLOOP__CHECK(field, expect, label)                                  \
    if (!what && (uint64_t)a->header.field != (uint64_t)(expect)) {         \
        what = label;                                                        \
        theirs = (uint64_t)a->header.field;                                  \
        ours = (uint64_t)(expect);                                           \
    }
        RTLOOP__CHECK(header_size, sizeof(rtloop_header), "header size")
        RTLOOP__CHECK(state_offset, RTLOOP_STATE_OFFSET, "state offset")
        RTLOOP__CHECK(state_size, sizeof(rtloop_state), "state size")
        RTLOOP__CHECK(command_offset, RTLOOP_COMMAND_OFFSET, "command offset")
        RTLOOP__CHECK(command_size, sizeof(rtloop_command), "command size")
        RTLOOP__CHECK(total_size, RTLOOP_TOTAL_SIZE, "total size")
        RTLOOP__CHECK(max_servos, RTLOOP_MAX_SERVOS, "servo capacity")
#undef RTLOOP__CHECK
        if (!what && a->header.servo_count > RTLOOP_MAX_SERVOS) {
            what = "servo count";
            theirs = a->header.servo_count;
            ours = RTLOOP_MAX_SERVOS;
        }
        if (what) {
            snprintf(err, errlen,
                     "the spine's %s is %llu but this agent expects %llu; rebuild the agent against the spine's rtloop_agent.h",
                     what, (unsigned long long)theirs, (unsigned long long)ours);
            goto fail;
        }
    }
    {
        int32_t pid = (int32_t)getpid();
        _Atomic int32_t *slot = (_Atomic int32_t *)&h->agent_pid;
        int32_t cur = atomic_load_explicit(slot, memory_order_relaxed);
        for (;;) {
            if (cur != 0 && cur != pid && !rtloop__pid_dead(cur)) {
                snprintf(err, errlen, "another agent (pid %d) is attached to rtloop-%s; stop it first", (int)cur, name);
                goto fail;
            }
            if (atomic_compare_exchange_strong(slot, &cur, pid)) {
                break;
            }
        }
        a->pid = pid;
    }
    a->fd = fd;
    a->map = (unsigned char *)map;
    /* Continue the command block's sequence and heartbeat where they stand. */
    {
        rtloop_command current;
        if (rtloop__read(a->map + RTLOOP_COMMAND_OFFSET, &current, sizeof current / 8, RTLOOP_READ_TRIES) == 0) {
            a->command_seq = current.seq;
            a->command.heartbeat = current.heartbeat;
        } else {
            uint64_t s = atomic_load_explicit(rtloop__seq(a->map + RTLOOP_COMMAND_OFFSET), memory_order_relaxed);
            a->command_seq = (s + 1) & ~(uint64_t)1;
        }
    }
    /* No reset pending: start from the last request the spine answered. */
    {
        rtloop_state state;
        if (rtloop__read(a->map + RTLOOP_STATE_OFFSET, &state, sizeof state / 8, RTLOOP_READ_TRIES) == 0) {
            a->command.reset_request = state.reset_ack;
        }
    }
    a->command.servo_count = a->header.servo_count;
    return RTLOOP_OK;
fail:
    rtloop__guard_release(a->guard_slot);
    a->guard_slot = -1;
    munmap(map, len);
    close(fd);
    return rc;
}

/* Copy the newest state into *out. Returns 0, or -1 (torn: the spine died mid-write). */
static inline int rtloop_agent_read_state(const rtloop_agent *a, rtloop_state *out) {
    return rtloop__read(a->map + RTLOOP_STATE_OFFSET, out, sizeof *out / 8, RTLOOP_READ_TRIES);
}

/* The state block's sequence now (one atomic load): equal to the `seq` of the last state
 * read, nothing new was published — poll this, and copy the block only when it moved. */
static inline uint64_t rtloop_agent_state_sequence(const rtloop_agent *a) {
    return atomic_load_explicit(rtloop__seq((void *)(a->map + RTLOOP_STATE_OFFSET)), memory_order_acquire);
}

/* Write a->command with the next heartbeat (sets heartbeat and servo_count); returns the heartbeat.
 * States this agent's version first: the spine follows commands only while agent_version is
 * its own, and an agent of another version that tried to attach meanwhile overwrote it. */
static inline uint64_t rtloop_agent_write_command(rtloop_agent *a) {
    atomic_store_explicit((_Atomic uint32_t *)&((rtloop_header *)a->map)->agent_version, RTLOOP_AGENT_VERSION,
                          memory_order_relaxed);
    a->command.heartbeat += 1;
    a->command.servo_count = a->header.servo_count;
    rtloop__write(a->map + RTLOOP_COMMAND_OFFSET, &a->command, sizeof a->command / 8, &a->command_seq);
    /* A lockstep spine sleeping on its bell reads the command at once. */
    rtloop__ring(rtloop__header_word(a, offsetof(rtloop_header, command_bell)),
                 rtloop__header_word(a, offsetof(rtloop_header, spine_waiting)));
    return a->command.heartbeat;
}

/* The spine's bell now: read it *before* looking at the state; if there was nothing to do,
 * pass it to rtloop_agent_sleep. */
static inline uint32_t rtloop_agent_state_bell(const rtloop_agent *a) {
    return atomic_load(rtloop__header_word(a, offsetof(rtloop_header, state_bell)));
}

/* Sleep, using no CPU, until the spine rings its bell (a lockstep spine rings when it
 * publishes a state it waits on, a new status, or its end) or `timeout_ns` passes; returns
 * at once if the bell moved since `seen`. May return early: look at the state again. A
 * free-running spine rings only for a new status: poll its states instead. */
static inline void rtloop_agent_sleep(const rtloop_agent *a, uint32_t seen, uint64_t timeout_ns) {
    _Atomic uint32_t *bell = rtloop__header_word(a, offsetof(rtloop_header, state_bell));
    _Atomic uint32_t *sleepers = rtloop__header_word(a, offsetof(rtloop_header, agent_waiting));
    struct timespec ts;
    ts.tv_sec = (time_t)(timeout_ns / 1000000000u);
    ts.tv_nsec = (long)(timeout_ns % 1000000000u);
    atomic_fetch_add(sleepers, 1u);
    if (atomic_load(bell) == seen) {
        syscall(SYS_futex, (uint32_t *)(void *)bell, 0 /* FUTEX_WAIT */, seen, &ts, NULL, 0);
    }
    atomic_fetch_sub(sleepers, 1u);
}

/* If the spine waits to be armed (WAITING or SAFE) with a token the commands do not echo,
 * echo it (the next write arms the spine) and return 1; otherwise 0. */
static inline int rtloop_agent_rearm(rtloop_agent *a, const rtloop_state *s) {
    if ((s->status == RTLOOP_STATUS_WAITING || s->status == RTLOOP_STATUS_SAFE) && s->arm_token != a->command.arm_token) {
        a->command.arm_token = s->arm_token;
        return 1;
    }
    return 0;
}

/* Nonzero when the segment was lost under the agent: another process truncated it (the
 * guard then gave this mapping zero pages instead of letting SIGBUS kill the agent), or
 * truncated and grew it again (its magic word is gone). Two atomic loads, no system call. */
static inline int rtloop_agent_segment_lost(const rtloop_agent *a) {
    /* Touch the last word: a file that shrank below it faults here, and the guard takes it. */
    (void)atomic_load_explicit((_Atomic uint64_t *)(void *)(a->map + RTLOOP_TOTAL_SIZE - 8), memory_order_relaxed);
    if (a->guard_slot >= 0 && atomic_load_explicit(&rtloop__guard_slots[a->guard_slot].lost, memory_order_acquire)) {
        return 1;
    }
    return atomic_load_explicit((_Atomic uint64_t *)(void *)a->map, memory_order_relaxed) != RTLOOP_MAGIC;
}

/* Nonzero when the spine is gone: 1 ended, 2 segment removed, 3 spine process dead, 4 the
 * segment was lost (truncated or replaced under the agent; the spine ends its run too). */
static inline int rtloop_agent_spine_gone(const rtloop_agent *a, const rtloop_state *s) {
    struct stat st;
    if (rtloop_agent_segment_lost(a)) {
        return 4;
    }
    if (s->status == RTLOOP_STATUS_ENDED) {
        return 1;
    }
    if (fstat(a->fd, &st) == 0 && st.st_nlink == 0) {
        return 2;
    }
    if (rtloop__pid_dead(a->header.spine_pid)) {
        return 3;
    }
    return 0;
}

/* Unregister (clear agent_pid if it is ours), unmap, close. */
static inline void rtloop_agent_detach(rtloop_agent *a) {
    if (a->map) {
        _Atomic int32_t *slot = (_Atomic int32_t *)&((rtloop_header *)a->map)->agent_pid;
        int32_t me = a->pid;
        atomic_compare_exchange_strong(slot, &me, 0);
        /* A lockstep spine sleeping on its bell sees at once that its agent left. */
        rtloop__ring(rtloop__header_word(a, offsetof(rtloop_header, command_bell)),
                     rtloop__header_word(a, offsetof(rtloop_header, spine_waiting)));
        rtloop__guard_release(a->guard_slot); /* before the range can be reused */
        a->guard_slot = -1;
        munmap(a->map, RTLOOP_TOTAL_SIZE);
        a->map = NULL;
    }
    if (a->fd >= 0) {
        close(a->fd);
        a->fd = -1;
    }
}

#endif /* RTLOOP_AGENT_H */
