import NIOCore
import Synchronization

/// Lets one task sleep until a deadline or until another rings, whichever comes first.
/// A ring while nobody sleeps makes the next sleep return at once, so a deadline set
/// between reading the next deadline and going to sleep is never missed.
///
/// The deadline is a task scheduled on an event loop, cancelled by a ring: a sleep makes no
/// child tasks and wakes no timer thread, and a sleeper running on that loop resumes there.
final class Alarm: Sendable {
    private struct State {
        /// Rung, or the sleeper cancelled, while nobody slept: the next sleep returns at once.
        var pending = false
        var sleeper: CheckedContinuation<Void, Never>?
        /// The current sleep's deadline on the loop.
        var deadline: Scheduled<Void>?
        /// Counts sleeps: a deadline that fires after its sleep ended wakes nobody.
        var sleeps: UInt64 = 0
    }

    private let state = Mutex(State())

    func ring() {
        wakeSleeper()
    }

    /// Returns at the deadline, on a ring, or when the task is cancelled.
    func sleep(until deadline: ContinuousClock.Instant, on loop: any EventLoop) async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let sleep: UInt64? = state.withLock { state in
                    defer { state.pending = false }
                    guard !state.pending else { return nil }
                    state.sleeper = continuation
                    state.sleeps += 1
                    return state.sleeps
                }
                guard let sleep else { return continuation.resume() }
                let scheduled = loop.scheduleTask(in: TimeAmount(max(.zero, deadline - .now))) { [self] in
                    wakeSleeper(ifStill: sleep)
                }
                let ended = state.withLock { state in
                    guard state.sleeper != nil, state.sleeps == sleep else { return true }
                    state.deadline = scheduled
                    return false
                }
                if ended { scheduled.cancel() }
            }
        } onCancel: {
            wakeSleeper()
        }
    }

    /// Resumes the sleeper and cancels its deadline, or, when nobody sleeps, makes the next
    /// sleep return at once. `ifStill`: the deadline of that sleep fired, which wakes only
    /// that sleep; a later one, or nobody sleeping, is left as it is.
    private func wakeSleeper(ifStill sleep: UInt64? = nil) {
        let (sleeper, deadline) = state.withLock { state -> (CheckedContinuation<Void, Never>?, Scheduled<Void>?) in
            if let sleep, state.sleeper == nil || state.sleeps != sleep { return (nil, nil) }
            defer { (state.sleeper, state.deadline) = (nil, nil) }
            if state.sleeper == nil { state.pending = true }
            return (state.sleeper, state.deadline)
        }
        deadline?.cancel()
        sleeper?.resume()
    }
}
