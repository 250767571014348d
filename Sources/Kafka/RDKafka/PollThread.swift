import CRdKafka
import Foundation
import Synchronization

/// The life of a librdkafka client's poll thread, shared by the consumer and the producer:
/// `run` starts it and returns once it ended, `stop` ends it and waits; the thread lives
/// exactly as long as the `run` call that started it (polling blocks inside librdkafka, so
/// it cannot run on a Swift concurrency thread).
final class PollThread: Sendable {
    private enum Phase {
        case created
        case polling
        case stopping
        case stopped
    }

    private struct State {
        var phase = Phase.created
        var waiting: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())
    private let name: String
    /// Called after a stop was requested: ends a wait inside the loop early.
    private let wake: @Sendable () -> Void

    /// `name` is what `top -H` and `perf` show for the thread. Linux keeps at most 15 bytes and
    /// refuses a longer name outright: the thread would go by its creator's name instead.
    init(name: String, wake: @escaping @Sendable () -> Void = {}) {
        precondition(name.utf8.count <= 15, "a thread name longer than Linux keeps: \(name)")
        self.name = name
        self.wake = wake
    }

    /// Whether the loop should go on.
    var isPolling: Bool { state.withLock { $0.phase == .polling } }

    /// Whether a stop was asked for or the loop ended: it will not come round again.
    var hasEnded: Bool { state.withLock { $0.phase == .stopping || $0.phase == .stopped } }

    /// Runs `loop` on its own thread (once; a later call only waits) and returns when it ended:
    /// the loop returns once `isPolling` turned false. Cancelling the task stops it.
    func run(_ loop: @escaping @Sendable () -> Void) async {
        let start = state.withLock { state in
            guard state.phase == .created else { return false }
            state.phase = .polling
            return true
        }
        if start { startThread(loop) }
        await withTaskCancellationHandler {
            await waitUntilStopped()
        } onCancel: {
            self.requestStop()
        }
    }

    /// Stops the loop and waits until it ended. If it never started, `neverStarted` runs on a
    /// thread instead (releasing what the loop would have released on its way out).
    func stop(neverStarted: @escaping @Sendable () -> Void = {}) async {
        let unstarted = state.withLock { state in
            switch state.phase {
            case .created:
                state.phase = .stopping
                return true
            case .polling:
                state.phase = .stopping
                return false
            case .stopping, .stopped:
                return false
            }
        }
        wake()
        if unstarted { startThread(neverStarted) }
        await waitUntilStopped()
    }

    func requestStop() {
        state.withLock { state in
            if state.phase == .polling { state.phase = .stopping }
        }
        wake()
    }

    private func startThread(_ body: @escaping @Sendable () -> Void) {
        let name = name
        let thread = Thread {
            // Named from inside, through pthreads: Foundation on Linux does not pass a name set
            // before the start on to the system thread, which then goes by its creator's (a global
            // executor's), and one set from inside through `Thread.current.name` was now and then
            // lost too (seen once in CI).
            Self.nameCurrentThread(name)
            body()
            self.markStopped()
        }
        thread.start()
    }

    private static func nameCurrentThread(_ name: String) {
        #if os(Linux)
        // Linux keeps 15 bytes of a thread's name and refuses a longer one whole (ERANGE). Cut
        // by characters: bytes cut inside one would decode to a replacement of three bytes.
        var kept = Substring(name)
        while kept.utf8.count > 15 { kept.removeLast() }
        _ = pthread_setname_np(pthread_self(), String(kept))
        #else
        Thread.current.name = name
        #endif
    }

    private func markStopped() {
        let waiters = state.withLock { state in
            state.phase = .stopped
            defer { state.waiting = [] }
            return state.waiting
        }
        waiters.forEach { $0.resume() }
    }

    private func waitUntilStopped() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let stopped = state.withLock { state in
                if state.phase == .stopped { return true }
                state.waiting.append(continuation)
                return false
            }
            if stopped { continuation.resume() }
        }
    }
}
