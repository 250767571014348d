import Synchronization

/// Lets one task sleep until a deadline or until another rings, whichever comes first.
/// A ring while nobody sleeps makes the next sleep return at once, so a deadline set
/// between reading the next deadline and going to sleep is never missed.
final class Alarm: Sendable {
    private struct State {
        /// Rung, or the sleeper cancelled, while nobody slept: the next sleep returns at once.
        var pending = false
        var sleeper: CheckedContinuation<Void, Never>?
    }

    private let state = Mutex(State())

    func ring() {
        wakeSleeper()
    }

    /// Returns at the deadline, on a ring, or when the task is cancelled.
    func sleep(until deadline: ContinuousClock.Instant) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await Task.sleep(until: deadline, clock: .continuous) }
            group.addTask { await self.waitForRing() }
            await group.next()
            group.cancelAll()
        }
    }

    private func waitForRing() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let returnNow = state.withLock { state in
                    defer { state.pending = false }
                    guard !state.pending else { return true }
                    state.sleeper = continuation
                    return false
                }
                if returnNow { continuation.resume() }
            }
        } onCancel: {
            wakeSleeper()
        }
    }

    /// Resumes the sleeper, or, when nobody sleeps yet, makes the next sleep return at once.
    private func wakeSleeper() {
        let sleeper = state.withLock { state in
            defer { state.sleeper = nil }
            if state.sleeper == nil { state.pending = true }
            return state.sleeper
        }
        sleeper?.resume()
    }
}
