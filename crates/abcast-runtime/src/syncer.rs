//! The driver's sync thread: it runs the slow half of a group commit (a `SyncJob`: the
//! fdatasyncs of what the event loop already wrote) while the loop goes on reading,
//! deciding and writing the next group. The loop holds every message that depends on the
//! job until the thread reports it done through a `mio::Waker`.
//!
//! Why: with fdatasync in the loop, a node did nothing else for the length of each sync (a
//! millisecond for a few hundred KiB here), so the next group could only start after it;
//! overlapping them lets a voter write the next group while the disk flushes the last.
//!
//! Up to [`SYNC_JOBS_IN_FLIGHT_MAX`] jobs at a time, run in the order they were submitted
//! (so in the order of the writes they cover), their results reported in that order. Why
//! more than one: with one, the disk waited while the loop, busy with the last group,
//! had not yet noticed the job done and submitted the next (measured at a voter under the
//! synced log at 8 KiB: the thread worked 4 ms of each 7 ms from submit to notice, and
//! the loop's work and the disk's took turns instead of overlapping).

use abcast_core::storage::{StorageError, SyncJob};
use std::sync::mpsc;
use std::thread::JoinHandle;

/// Jobs submitted and not yet reported done, at most.
pub const SYNC_JOBS_IN_FLIGHT_MAX: usize = 2;

pub struct Syncer {
    jobs: Option<mpsc::SyncSender<SyncJob>>,
    done: mpsc::Receiver<Result<(), StorageError>>,
    thread: Option<JoinHandle<()>>,
    /// Jobs submitted whose results were not yet taken.
    in_flight: usize,
}

impl Syncer {
    /// Starts the thread; `waker` wakes the event loop after each job.
    pub fn start(waker: mio::Waker) -> std::io::Result<Syncer> {
        let (jobs, rx) = mpsc::sync_channel::<SyncJob>(SYNC_JOBS_IN_FLIGHT_MAX);
        let (tx, done) = mpsc::sync_channel(SYNC_JOBS_IN_FLIGHT_MAX);
        let thread = std::thread::Builder::new()
            .name("abcast-sync".into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    let r = job.run();
                    if tx.send(r).is_err() {
                        return;
                    }
                    // A failed wake leaves the result for the loop's next iteration
                    // (`try_done`), which comes within its longest poll.
                    let _ = waker.wake();
                }
            })?;
        Ok(Syncer {
            jobs: Some(jobs),
            done,
            thread: Some(thread),
            in_flight: 0,
        })
    }

    /// Jobs submitted whose results were not yet taken.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Whether another job may be submitted now.
    pub fn has_room(&self) -> bool {
        self.in_flight < SYNC_JOBS_IN_FLIGHT_MAX
    }

    /// Hands a job to the thread, behind those in flight. Only when it `has_room`.
    pub fn submit(&mut self, job: SyncJob) -> Result<(), StorageError> {
        debug_assert!(
            self.has_room(),
            "more sync jobs than SYNC_JOBS_IN_FLIGHT_MAX"
        );
        let sent = self.jobs.as_ref().is_some_and(|j| j.send(job).is_ok());
        if !sent {
            return Err(StorageError("the sync thread is gone".into()));
        }
        self.in_flight += 1;
        Ok(())
    }

    /// The result of the oldest job in flight, if it is done.
    pub fn try_done(&mut self) -> Option<Result<(), StorageError>> {
        if self.in_flight == 0 {
            return None;
        }
        let r = match self.done.try_recv() {
            Ok(r) => r,
            Err(mpsc::TryRecvError::Empty) => return None,
            Err(mpsc::TryRecvError::Disconnected) => {
                Err(StorageError("the sync thread is gone".into()))
            }
        };
        self.in_flight -= 1;
        Some(r)
    }

    /// Waits for the oldest job in flight (there must be one).
    pub fn wait(&mut self) -> Result<(), StorageError> {
        debug_assert!(self.in_flight > 0, "waiting without a job in flight");
        self.in_flight -= 1;
        self.done
            .recv()
            .unwrap_or_else(|_| Err(StorageError("the sync thread is gone".into())))
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    #[test]
    fn jobs_run_in_order_off_the_caller_thread_and_wake_it() {
        let mut poll = mio::Poll::new().expect("poll");
        let waker = mio::Waker::new(poll.registry(), mio::Token(7)).expect("waker");
        let mut s = Syncer::start(waker).expect("thread");
        let ran = Arc::new(AtomicU32::new(0));
        for k in 1..=3 {
            let mut job = SyncJob::default();
            let ran2 = Arc::clone(&ran);
            let caller = std::thread::current().id();
            job.push(
                format!("step {k}"),
                Box::new(move || {
                    assert_ne!(std::thread::current().id(), caller);
                    assert_eq!(ran2.fetch_add(1, Ordering::SeqCst), k - 1, "in order");
                    Ok(())
                }),
            );
            s.submit(job).expect("submit");
            assert_eq!(s.in_flight(), 1);
            let mut events = mio::Events::with_capacity(4);
            poll.poll(&mut events, Some(Duration::from_secs(10)))
                .expect("poll");
            assert!(events.iter().any(|e| e.token() == mio::Token(7)), "woken");
            assert_eq!(s.try_done(), Some(Ok(())));
            assert_eq!(s.in_flight(), 0);
        }
        // A failing step comes back as the job's error, naming the step.
        let mut job = SyncJob::default();
        job.push(
            "seg-1: syncing".into(),
            Box::new(|| Err(std::io::Error::other("disk on fire"))),
        );
        s.submit(job).expect("submit");
        let e = s.wait().expect_err("the step failed");
        assert!(
            e.0.contains("seg-1: syncing") && e.0.contains("disk on fire"),
            "{e}"
        );
    }

    #[test]
    fn two_jobs_in_flight_run_in_order_and_report_in_order() {
        let poll = mio::Poll::new().expect("poll");
        let waker = mio::Waker::new(poll.registry(), mio::Token(7)).expect("waker");
        let mut s = Syncer::start(waker).expect("thread");
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let ran = Arc::new(AtomicU32::new(0));
        let mut first = SyncJob::default();
        let ran1 = Arc::clone(&ran);
        first.push(
            "first".into(),
            Box::new(move || {
                gate.recv().map_err(std::io::Error::other)?;
                assert_eq!(ran1.fetch_add(1, Ordering::SeqCst), 0, "first runs first");
                Ok(())
            }),
        );
        let mut second = SyncJob::default();
        let ran2 = Arc::clone(&ran);
        second.push(
            "second".into(),
            Box::new(move || {
                assert_eq!(ran2.fetch_add(1, Ordering::SeqCst), 1, "second runs second");
                Err(std::io::Error::other("second failed"))
            }),
        );
        s.submit(first).expect("submit");
        assert!(s.has_room());
        s.submit(second).expect("submit");
        assert!(!s.has_room(), "at most {SYNC_JOBS_IN_FLIGHT_MAX} in flight");
        // Neither is done while the first waits.
        assert_eq!(s.try_done(), None);
        release.send(()).expect("release");
        assert_eq!(s.wait(), Ok(()), "the first job's result comes first");
        let e = s.wait().expect_err("then the second's");
        assert!(e.0.contains("second failed"), "{e}");
        assert_eq!(s.in_flight(), 0);
        assert_eq!(ran.load(Ordering::SeqCst), 2);
    }
}
