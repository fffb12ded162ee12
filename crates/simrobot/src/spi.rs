//! The simulated pi3hat behind rtloop-io's SPI interface ([`rtloop_io::spi::Pi3hatSpi`]):
//! rtloop-io's pi3hat driver talks to it register by register, as to the board's three
//! processors, and cannot tell it from one.
//!
//! Must never: allocate in a transaction, or hold the robot's lock across a wait.

use crate::robot::SimRobot;
use rtloop_io::spi::{ChipSelect, Pi3hatSpi, SpiError, SpiTiming};
use rtloop_io::Clock;
use rtloop_sim::pi3hat::{SimPi3hat, Transfer};

/// How far the simulated board's SPI may run ahead of a real clock, ns. A simulated board has
/// no hardware to poll: a transaction's result is ready when the call computes it, so the host
/// need not wait for each one. It sleeps only when the board is more than this far ahead (to
/// half of it, so a wakeup up to 100 µs late costs the board's timeline nothing) and when the
/// board has every reply owed ([`Pi3hatSpi::settle`]), so a cycle still ends when the board's
/// SPI does. Never spinning keeps a SCHED_FIFO cycle thread on `pi3hat:sim` from holding a
/// core (it spun for 85 % of one at 1 kHz).
pub const SIM_SPI_LEAD_NS: u64 = 200_000;

/// A simulated pi3hat of a [`SimRobot`] as an SPI carrier: each transaction is handed to the
/// board at the clock's now (the board starts it when its SPI is free). On a virtual clock the
/// call returns when the board says the SPI bus is free again, moving time forward, so a
/// cycle's simulated time is exactly SPI + wire + turnaround. On a real clock the board may
/// run up to [`SIM_SPI_LEAD_NS`] ahead and the host sleeps, never spins
/// ([`Clock::wait_for_simulated_ns`]).
pub struct SimSpi<C: Clock + Send> {
    pub(crate) robot: SimRobot,
    /// Index into the robot's boards.
    pub(crate) board: usize,
    pub(crate) clock: C,
}

impl<C: Clock + Send> SimSpi<C> {
    /// `board` on its own (a simulated robot of one board), on `clock`: for a tool or a test
    /// that drives one board through rtloop-io's pi3hat driver.
    pub fn new(board: SimPi3hat, clock: C) -> Self {
        let robot = SimRobot::new();
        robot.lock().boards.push(board);
        SimSpi { robot, board: 0, clock }
    }

    /// Run `f` on the board (statistics, queues).
    pub fn with_board<R>(&self, f: impl FnOnce(&mut SimPi3hat) -> R) -> Option<R> {
        self.with(f)
    }

    fn with<R>(&self, f: impl FnOnce(&mut SimPi3hat) -> R) -> Option<R> {
        self.robot.lock().boards.get_mut(self.board).map(f)
    }

    /// Wait for the transaction's end (the lock is not held: `t` is a copy).
    fn finish(&self, t: Option<Transfer>) -> Result<(), SpiError> {
        let t = t.ok_or(SpiError::NoSuchProcessor(0))?;
        self.clock.wait_for_simulated_ns(t.end_ns, SIM_SPI_LEAD_NS);
        t.result.map_err(SpiError::Register)
    }
}

impl<C: Clock + Send> Pi3hatSpi for SimSpi<C> {
    fn name(&self) -> &str {
        "sim"
    }

    fn read(&mut self, cs: ChipSelect, address: u8, out: &mut [u8]) -> Result<(), SpiError> {
        let now = self.clock.now_ns();
        let t = self.with(|board| board.read(cs.processor(), address, out, now));
        self.finish(t)
    }

    fn write(&mut self, cs: ChipSelect, address: u8, data: &[u8]) -> Result<(), SpiError> {
        let now = self.clock.now_ns();
        let t = self.with(|board| board.write(cs.processor(), address, data, now));
        self.finish(t)
    }

    fn timing(&self) -> SpiTiming {
        self.with(|board| {
            let c = board.config();
            SpiTiming {
                speed_hz: c.spi_hz,
                cs_hold_ns: c.cs_hold_ns.min(u64::from(u32::MAX)) as u32,
                address_hold_ns: c.address_hold_ns.min(u64::from(u32::MAX)) as u32,
            }
        })
        .unwrap_or_default()
    }

    fn ready_hint_ns(&self) -> Option<u64> {
        self.with(|board| board.next_event_ns()).flatten()
    }

    fn busy_until_ns(&self) -> Option<u64> {
        self.with(|board| board.spi_free_ns())
    }

    fn settle(&mut self) {
        if let Some(free) = self.with(|board| board.spi_free_ns()) {
            self.clock.wait_for_simulated_ns(free, 0);
        }
    }
}
