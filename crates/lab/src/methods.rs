//! The methods the experiments compare — how [`crate::event`] raises and waits for an event,
//! how [`crate::serial`] waits for an echo, how [`crate::udp`] receives a datagram — and
//! their command-line spellings.
//!
//! What it must never do: import anything of the lab but the refusal of an unknown name
//! ([`CheckError`]): the errors name the method that failed, and the experiments stand on
//! both.

use crate::check::CheckError;
use std::fmt;
use std::str::FromStr;

/// How the event is raised and waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventMethod {
    /// eventfd(2): write 1, the waiter's blocking read returns.
    Eventfd,
    /// A pipe: write one byte, the waiter's blocking read returns.
    Pipe,
    /// futex(2) on a word in shared memory: store the new value, FUTEX_WAKE.
    Futex,
    /// A word in shared memory, polled in a spin loop: no system call at all.
    BusyPoll,
}

impl EventMethod {
    /// All methods, in the order they are measured by default.
    pub const ALL: [EventMethod; 4] =
        [EventMethod::Eventfd, EventMethod::Pipe, EventMethod::Futex, EventMethod::BusyPoll];

    /// The command-line spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EventMethod::Eventfd => "eventfd",
            EventMethod::Pipe => "pipe",
            EventMethod::Futex => "futex",
            EventMethod::BusyPoll => "busy-poll",
        }
    }
}

impl fmt::Display for EventMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventMethod {
    type Err = CheckError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventMethod::ALL.into_iter().find(|m| m.as_str() == s).ok_or_else(|| CheckError::UnknownMethod {
            kind: "event",
            given: s.to_string(),
            expected: "eventfd, pipe, futex or busy-poll",
        })
    }
}

/// How the measuring side waits for the echo.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SerialMethod {
    /// A blocking read with VMIN = size (at most 255), so one wake-up per message.
    Blocking,
    /// epoll_wait on the descriptor, then non-blocking reads until the message is in.
    Epoll,
    /// Non-blocking reads in a spin loop.
    BusyPoll,
}

impl SerialMethod {
    /// All methods, in the order they are measured by default.
    pub const ALL: [SerialMethod; 3] = [SerialMethod::Blocking, SerialMethod::Epoll, SerialMethod::BusyPoll];

    /// The command-line spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SerialMethod::Blocking => "blocking",
            SerialMethod::Epoll => "epoll",
            SerialMethod::BusyPoll => "busy-poll",
        }
    }
}

impl fmt::Display for SerialMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SerialMethod {
    type Err = CheckError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SerialMethod::ALL.into_iter().find(|m| m.as_str() == s).ok_or_else(|| CheckError::UnknownMethod {
            kind: "serial",
            given: s.to_string(),
            expected: "blocking, epoll or busy-poll",
        })
    }
}

/// How the receiving side waits for a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecvMethod {
    /// A blocking `recv` (the thread sleeps in the kernel until the datagram arrives).
    Blocking,
    /// `epoll_wait` on the socket, then a non-blocking `recv`.
    Epoll,
    /// A non-blocking `recv` retried in a spin loop (burns a CPU, no wakeup latency).
    BusyPoll,
}

impl RecvMethod {
    /// The command-line spelling: blocking, epoll or busy-poll.
    pub fn as_str(self) -> &'static str {
        match self {
            RecvMethod::Blocking => "blocking",
            RecvMethod::Epoll => "epoll",
            RecvMethod::BusyPoll => "busy-poll",
        }
    }
}

impl fmt::Display for RecvMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RecvMethod {
    type Err = CheckError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "blocking" => Ok(RecvMethod::Blocking),
            "epoll" => Ok(RecvMethod::Epoll),
            "busy-poll" => Ok(RecvMethod::BusyPoll),
            _ => Err(CheckError::UnknownMethod {
                kind: "receive",
                given: s.to_string(),
                expected: "blocking, epoll or busy-poll",
            }),
        }
    }
}
