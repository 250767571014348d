import Foundation
import Synchronization
import Testing

/// A child process's exit status, awaited from its termination handler. On Linux,
/// Foundation's `waitUntilExit` spins its thread's run loop while the child runs, which takes
/// a core from the relay under test for as long as it drains.
final class ProcessExit: Sendable {
    private struct State {
        var status: Int32?
        var waiters: [UUID: CheckedContinuation<Int32?, Never>] = [:]
        /// Waiters whose limit passed before they were registered.
        var expired: Set<UUID> = []
    }
    private let state = Mutex(State())

    /// Installs the termination handler: call before `process.run()`.
    init(of process: Process) {
        process.terminationHandler = { [self] ended in self.exited(ended.terminationStatus) }
    }

    /// The status, or nil if the process is still running after `limit`.
    func status(within limit: Duration) async -> Int32? {
        let waiter = UUID()
        return await withTaskGroup(of: Void.self) { timer in
            timer.addTask {
                guard (try? await Task.sleep(for: limit)) != nil else { return }
                self.expire(waiter)
            }
            let status = await withCheckedContinuation { continuation in
                let answer = state.withLock { state -> Int32?? in
                    if let status = state.status { return .some(status) }
                    if state.expired.remove(waiter) != nil { return .some(nil) }
                    state.waiters[waiter] = continuation
                    return .none
                }
                if let answer { continuation.resume(returning: answer) }
            }
            timer.cancelAll()
            return status
        }
    }

    private func expire(_ waiter: UUID) {
        let registered = state.withLock { state in
            guard let continuation = state.waiters.removeValue(forKey: waiter) else {
                if state.status == nil { state.expired.insert(waiter) }
                return nil as CheckedContinuation<Int32?, Never>?
            }
            return continuation
        }
        registered?.resume(returning: nil)
    }

    private func exited(_ status: Int32) {
        let waiters = state.withLock { state in
            state.status = status
            defer { state.waiters = [:] }
            return state.waiters.values
        }
        for waiter in waiters { waiter.resume(returning: status) }
    }
}

extension Process {
    /// Waits for the exit status; a process still running after `limit` is killed and the test
    /// fails, so that a process that never exits is a failure with its name, not a hung suite.
    func exitStatus(_ exit: ProcessExit, within limit: Duration = .seconds(300)) async -> Int32 {
        if let status = await exit.status(within: limit) { return status }
        Issue.record("\(executableURL?.lastPathComponent ?? "the process") \(arguments?.first ?? "") did not exit within \(limit); killed")
        kill(processIdentifier, SIGKILL)
        return await exit.status(within: .seconds(30)) ?? SIGKILL
    }
}
