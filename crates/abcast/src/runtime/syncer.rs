//! The driver's sync thread: it runs the slow half of a group commit (a `SyncJob`: the
//! fdatasyncs of what the event loop already wrote) while the loop goes on reading,
//! deciding and writing the next group. The loop holds every message that depends on the
//! job until the thread reports it done through a `mio::Waker`.
//!
//! Why: with fdatasync in the loop, a node did nothing else for the length of each sync (a
//! millisecond for a few hundred KiB here), so the next group could only start after it;
//! overlapping them lets a voter write the next group while the disk flushes the last.
//!
//! One job at a time: the driver submits the next only after the last one's result came
//! back, so the jobs' order is the order of the writes they cover.

use abcast_core::storage::{StorageError, SyncJob};
use std::sync::mpsc;
use std::thread::JoinHandle;

pub struct Syncer {
    jobs: Option<mpsc::SyncSender<SyncJob>>,
    done: mpsc::Receiver<Result<(), StorageError>>,
    thread: Option<JoinHandle<()>>,
    /// A job was submitted and its result not yet taken.
    busy: bool,
}

impl Syncer {
    /// Starts the thread; `waker` wakes the event loop after each job.
    pub fn start(waker: mio::Waker) -> std::io::Result<Syncer> {
        let (jobs, rx) = mpsc::sync_channel::<SyncJob>(1);
        let (tx, done) = mpsc::sync_channel(1);
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
            busy: false,
        })
    }

    pub fn busy(&self) -> bool {
        self.busy
    }

    /// Hands a job to the thread. Only when not `busy`.
    pub fn submit(&mut self, job: SyncJob) -> Result<(), StorageError> {
        debug_assert!(!self.busy, "one sync job at a time");
        let sent = self.jobs.as_ref().is_some_and(|j| j.send(job).is_ok());
        if !sent {
            return Err(StorageError("the sync thread is gone".into()));
        }
        self.busy = true;
        Ok(())
    }

    /// The result of the job in flight, if it is done.
    pub fn try_done(&mut self) -> Option<Result<(), StorageError>> {
        if !self.busy {
            return None;
        }
        let r = match self.done.try_recv() {
            Ok(r) => r,
            Err(mpsc::TryRecvError::Empty) => return None,
            Err(mpsc::TryRecvError::Disconnected) => {
                Err(StorageError("the sync thread is gone".into()))
            }
        };
        self.busy = false;
        Some(r)
    }

    /// Waits for the job in flight (there must be one).
    pub fn wait(&mut self) -> Result<(), StorageError> {
        debug_assert!(self.busy, "waiting without a job in flight");
        self.busy = false;
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
            assert!(s.busy());
            let mut events = mio::Events::with_capacity(4);
            poll.poll(&mut events, Some(Duration::from_secs(10)))
                .expect("poll");
            assert!(events.iter().any(|e| e.token() == mio::Token(7)), "woken");
            assert_eq!(s.try_done(), Some(Ok(())));
            assert!(!s.busy());
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
}
