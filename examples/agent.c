/*
 * agent.c — a complete rtloop agent in plain C: it holds every joint at its stand pose.
 *
 *   cc -O2 -Wall -Wextra -std=c11 -I crates/agent/include examples/agent.c -o agent
 *   rtloop run --agent demo &      # the spine
 *   ./agent demo
 *
 * It attaches to /dev/shm/rtloop-NAME (retrying for up to 5 s until the spine exists), then
 * for every new state the spine publishes writes one command: a position command for every
 * servo at its stand position, computed "for" that state's cycle (which steps a lockstep
 * run). Each command is also the agent's heartbeat. When the spine waits to be armed — at
 * the start, and again after the agent was too slow and the spine went safe — the agent
 * echoes the published arm token, which arms it; that is the only way a spine starts
 * following an agent.
 *
 * Waiting for the next state: with RTLOOP_AGENT_BUSY=1 in the environment it busy-polls
 * (lowest latency, one CPU kept busy: give it a core of its own). Otherwise, in lockstep it
 * sleeps on the spine's bell (no CPU until the spine publishes a state to answer), and in a
 * free-running run it sleeps 20 µs between looks.
 *
 * Exit status: 0 when the spine goes away (it ended, removed the segment, or died) or on
 * SIGINT/SIGTERM; 1 with a one-line message when it cannot attach, or when another process
 * truncated the segment under it (the header's SIGBUS guard keeps it alive to say so); 2
 * for a usage error.
 */
#define _POSIX_C_SOURCE 200809L

#include "rtloop_agent.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile sig_atomic_t stop_requested = 0;

static void on_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_us(long us) {
    struct timespec ts = {0, us * 1000L};
    nanosleep(&ts, NULL);
}

/* The stand pose: where each joint is held, in revolutions. Zero for every joint here;
 * a real robot would look its joints up by servo->id and servo->bus. */
static double stand_position(const rtloop_servo_info *servo) {
    (void)servo;
    return 0.0;
}

/* Fill the command for `state`: hold every servo at its stand position. */
static void stand(rtloop_agent *agent, const rtloop_state *state) {
    rtloop_command *cmd = &agent->command;
    cmd->for_cycle = state->cycle;
    for (uint32_t i = 0; i < agent->header.servo_count; i++) {
        rtloop_servo_command *c = &cmd->servos[i];
        memset(c, 0, sizeof *c);
        c->kind = RTLOOP_KIND_POSITION;
        c->position = stand_position(&agent->header.servos[i]);
        c->velocity = 0.0;
        c->kp_scale = 1.0;
        c->kd_scale = 1.0;
        c->watchdog_timeout = 0.1; /* seconds: the servo stops by itself if commands stop */
        c->present = RTLOOP_F_POSITION | RTLOOP_F_VELOCITY | RTLOOP_F_KP_SCALE | RTLOOP_F_KD_SCALE |
                     RTLOOP_F_WATCHDOG_TIMEOUT;
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s NAME  (the name given to `rtloop run --agent NAME`)\n", argv[0]);
        return 2;
    }
    const char *name = argv[1];

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    rtloop_agent agent;
    char err[512];
    uint64_t give_up = now_ns() + 5000000000ull;
    for (;;) {
        int rc = rtloop_agent_attach(&agent, name, err, sizeof err);
        if (rc == RTLOOP_OK) {
            break;
        }
        if (rc == RTLOOP_RETRY && now_ns() < give_up && !stop_requested) {
            sleep_us(10000);
            continue;
        }
        fprintf(stderr, "agent: %s\n", err);
        return 1;
    }
    fprintf(stderr, "agent: attached to rtloop-%s: %u servos at %.1f Hz%s\n", name, agent.header.servo_count,
            agent.header.rate_hz, agent.header.lockstep ? ", lockstep" : "");

    const char *busy_env = getenv("RTLOOP_AGENT_BUSY");
    const int busy = busy_env != NULL && busy_env[0] == '1';
    const int bells = agent.header.lockstep && !busy;

    static rtloop_state state; /* 3.4 KB: keep it off the stack */
    int have_state = 0;
    uint64_t last_cycle = 0;
    uint64_t last_gone_check = 0;
    int gone = 0; /* why the spine is gone: rtloop_agent_spine_gone's answer */
    unsigned idle_looks = 0;
    while (!stop_requested) {
        /* Read the bell before looking: a state published after the look moves it. */
        uint32_t bell = bells ? rtloop_agent_state_bell(&agent) : 0;
        /* Nothing new published since the last state read: look again (cheaply). */
        if (have_state && rtloop_agent_state_sequence(&agent) == state.seq) {
            /* Reading the clock costs more than a look: only every 1024 looks when busy. */
            if (busy && (++idle_looks & 1023u) != 0) {
                continue;
            }
            uint64_t now = now_ns();
            if (now - last_gone_check > 10000000ull) { /* every 10 ms: two system calls */
                last_gone_check = now;
                if ((gone = rtloop_agent_spine_gone(&agent, &state)) != 0) {
                    break;
                }
            }
            if (bells) {
                rtloop_agent_sleep(&agent, bell, 10000000ull); /* at most 10 ms, then look again */
            } else if (!busy) {
                sleep_us(20);
            }
            continue;
        }
        if (rtloop_agent_read_state(&agent, &state) != 0) {
            /* Only a spine that died mid-write leaves the block torn. */
            if ((gone = rtloop_agent_spine_gone(&agent, &state)) != 0) {
                break;
            }
            continue;
        }
        if (state.status == RTLOOP_STATUS_ENDED) {
            break;
        }
        uint64_t now = now_ns();
        if (now - last_gone_check > 10000000ull) { /* every 10 ms: two system calls */
            last_gone_check = now;
            if ((gone = rtloop_agent_spine_gone(&agent, &state)) != 0) {
                break;
            }
        }
        int rearmed = rtloop_agent_rearm(&agent, &state);
        if (rearmed) {
            fprintf(stderr, "agent: arming (token %016llx, %llu timeouts so far)\n",
                    (unsigned long long)state.arm_token, (unsigned long long)state.timeouts);
        }
        if (rearmed || !have_state || state.cycle != last_cycle) {
            have_state = 1;
            last_cycle = state.cycle;
            stand(&agent, &state);
            rtloop_agent_write_command(&agent);
            continue;
        }
        if (!busy) {
            sleep_us(20);
        }
    }
    int status = 0;
    if (stop_requested) {
        fprintf(stderr, "agent: stopped by a signal; exiting\n");
    } else if (gone == 4) {
        /* The guard kept the agent alive through the SIGBUS; the spine ends its run too. */
        fprintf(stderr,
                "agent: /dev/shm/rtloop-%s was truncated (or replaced) by another process, so the spine ends its run; "
                "never write to /dev/shm/rtloop-%s while a spine runs\n",
                name, name);
        status = 1;
    } else {
        fprintf(stderr, "agent: the spine is gone after cycle %llu; exiting\n", (unsigned long long)state.cycle);
    }
    rtloop_agent_detach(&agent);
    return status;
}
