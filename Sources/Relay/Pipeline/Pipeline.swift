import Foundation
import Kafka
import NIOCore

/// A request worker or a letter writer waiting for its next piece of work (nil: no more will
/// come). The state hands each waiting one out once, so a checked continuation's per-wait
/// canary (an allocation per request) would buy nothing.
public enum PipelineWaiter: Sendable {
    /// A task suspended until it is handed its work.
    case task(UnsafeContinuation<PipelineWork?, Never>)
    /// A request slot, which starts what it is handed on its event loop.
    case slot(RequestSlot)

    func hand(_ work: PipelineWork?) {
        switch self {
        case .task(let continuation): continuation.resume(returning: work)
        case .slot(let slot):
            switch work {
            case .request(let request)?: slot.hand(request)
            case nil: slot.hand(nil)
            case .letter?: preconditionFailure("letters go to letter writers, never to a request slot")
            }
        }
    }
}

/// `PipelineState` behind one lock, for the relay's tasks and librdkafka's poll thread.
/// Each method runs one event under the lock, then — outside it — resumes the workers the
/// event released, rings the timer and wakes a waiting revoke; the rest of the actions
/// (dead letters, pause changes, counts) go back to the caller.
final class Pipeline: @unchecked Sendable {  // `state` is guarded by `lock`
    typealias Worker = PipelineWaiter

    typealias Actions = PipelineActions<Worker>

    /// A condition as the lock, so that a revoke on the poll thread can wait for work to end.
    private let lock = NSCondition()
    private var state: PipelineState<Worker>
    private let alarm = Alarm()

    init(limits: PipelineState<Worker>.Limits) {
        self.state = PipelineState(limits: limits, now: .now)
    }

    /// Reads the state under the lock.
    func read<Value>(_ body: (PipelineState<Worker>) -> Value) -> Value {
        lock.lock()
        defer { lock.unlock() }
        return body(state)
    }

    /// Changes the state under the lock, for events that release nothing.
    func update(_ body: (inout PipelineState<Worker>) -> Void) {
        lock.lock()
        body(&state)
        lock.unlock()
    }

    /// Hands a commit order to Kafka; returns why when Kafka refused it at once.
    typealias CommitIssuer = @Sendable (CommitOrder) -> String?
    private var issueCommit: CommitIssuer?

    /// From now on, commit orders go to Kafka through `issuer`, which must not block and must
    /// not call back into the pipeline before it returned.
    func issueCommits(through issuer: CommitIssuer?) {
        lock.lock()
        issueCommit = issuer
        lock.unlock()
    }

    /// Hands a pause wish to the record source, which applies it only when its sequence number
    /// is higher than the last one it applied; must not block.
    typealias PauseApplier = @Sendable (_ wish: Set<TopicPartition>, _ sequence: UInt64) -> Void
    private var applyPauseWish: PauseApplier?

    /// From now on, pause wishes go to the record source through `applier`, outside the lock:
    /// two events changing the wish on two threads may hand them over swapped, and the
    /// sequence number lets the source keep the newer one.
    func applyPauses(through applier: PauseApplier?) {
        lock.lock()
        applyPauseWish = applier
        lock.unlock()
    }

    /// Runs one event under the lock and carries out its mechanical actions after it.
    @discardableResult
    func handle(_ event: (inout PipelineState<Worker>) -> Actions) -> Actions {
        lock.lock()
        return unlock(after: event(&state))
    }

    /// Runs one event that causes something of its own beside the common actions.
    func handle<Caused>(_ event: (inout PipelineState<Worker>) -> (Actions, Caused)) -> (Actions, Caused) {
        lock.lock()
        let (actions, caused) = event(&state)
        return (unlock(after: actions), caused)
    }

    /// The timer's turn. The one call made inside the lock is the commit enqueue: a revoke
    /// takes the lock before its partitions go, so it cannot slip between the order (made for
    /// partitions still owned) and the commit entering librdkafka's queue, where it goes out
    /// with the group generation of that moment. Committed later, it could rewind the next
    /// owner's offset. The enqueue neither blocks nor calls back into the pipeline.
    private func deadlineReached() -> (Actions, CommitDeadline) {
        lock.lock()
        let (actions, commit) = state.deadlineReached(now: .now, issueCommit: issueCommit ?? { _ in nil })
        return (unlock(after: actions), commit)
    }

    /// Leaves the lock taken by an event, then hands over the pause wish, wakes a waiting
    /// revoke, rings the timer and resumes the workers and writers the event released.
    private func unlock(after actions: Actions) -> Actions {
        let applyPauseWish = actions.pause == nil ? nil : self.applyPauseWish
        lock.unlock()
        if let change = actions.pause { applyPauseWish?(change.wish, change.sequence) }
        if actions.workFinished { lock.broadcast() }
        if actions.wakeTimer { alarm.ring() }
        for (worker, request) in actions.resume { worker.hand(request.map(PipelineWork.request)) }
        for (writer, letter) in actions.resumeLetters { writer.hand(letter.map(PipelineWork.letter)) }
        return actions
    }

    /// Runs an event that can change only the pause wish, and hands the wish over after it,
    /// outside the lock.
    @discardableResult
    func changePauses(_ event: (inout PipelineState<Worker>) -> PauseChange?) -> PauseChange? {
        lock.lock()
        let change = event(&state)
        let applyPauseWish = change == nil ? nil : self.applyPauseWish
        lock.unlock()
        if let change { applyPauseWish?(change.wish, change.sequence) }
        return change
    }

    /// Suspends until a letter is ready for this writer; nil when no more will come.
    func nextLetter(whenReady apply: (Actions) -> Void) async -> DeadLetterOrder? {
        let work = await withUnsafeContinuation { writer in
            apply(handle { $0.requestLetter(.task(writer), now: .now) })
        }
        guard case .letter(let letter)? = work else { return nil }
        return letter
    }

    /// Registers a request slot for its next request, which it is handed (at once, when one is
    /// ready) through `RequestSlot.hand`.
    func requestWork(for slot: RequestSlot, whenReady apply: (Actions) -> Void) {
        apply(handle { $0.requestWork(.slot(slot), now: .now) })
    }

    /// Blocks the calling thread (the poll thread, in a revoke) until no work on the
    /// partitions is under way or `timeout` passed; returns how much is still under way.
    /// Woken whenever work ends, never by a timer.
    func waitUntilIdle(_ partitions: [TopicPartition], timeout: Duration) -> Int {
        let deadline = Date(timeIntervalSinceNow: timeout.inSeconds)
        lock.lock()
        defer { lock.unlock() }
        while state.workUnderWay(in: partitions) > 0, lock.wait(until: deadline) {}
        return state.workUnderWay(in: partitions)
    }

    private func timerWillSleep() -> ContinuousClock.Instant {
        lock.lock()
        defer { lock.unlock() }
        return state.timerWillSleep()
    }

    /// Releases deferred vehicles at their due time and forgets idle ones, sleeping in between
    /// until the next deadline (or until an event sets an earlier one), until cancelled.
    func runDeadlines(on loop: any EventLoop, apply: (Actions, CommitDeadline) -> Void) async {
        while !Task.isCancelled {
            await alarm.sleep(until: timerWillSleep(), on: loop)
            let (actions, commit) = deadlineReached()
            apply(actions, commit)
        }
    }
}
