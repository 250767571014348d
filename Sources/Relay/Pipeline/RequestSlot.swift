import Egress
import NIOCore
import Synchronization

/// One of the pipeline's request workers, bound to an event loop. A request that needs no
/// waiting (its vehicle's token ready, no live location to read, a ready HTTP/2 connection on
/// this loop) starts there as soon as the slot is handed it, and its answer, arriving on the
/// same loop, finishes it and takes the next request: no task is resumed and no thread is
/// woken in between. A request that has to wait (a mint, a live read, a connection to open, a
/// refused token) goes to the slot's task, which awaits the forwarder's whole attempt; so does
/// the end of the work.
///
/// Threading: `hand` and the task's cancellation may come from any thread; everything else
/// runs on `loop`.
public final class RequestSlot: EgressAnswerReceiver, @unchecked Sendable {  // its mutable state is touched on `loop` only
    /// What the slot hands its task.
    enum TaskWork {
        /// A request to attempt through `UpdateForwarder.deliver`: `afterRefusal` is the attempt so
        /// far when the slot began it and Fleet Engine refused the token; `resent` when the slot
        /// sent it and the server certainly did not process it.
        case attempt(CoalescedRequest, afterRefusal: Delivery? = nil, resent: Bool = false)
        /// No more requests will come.
        case end
    }

    /// What waits in the mailbox.
    private enum Handed {
        /// The request, or nil: no more will come.
        case handed(CoalescedRequest?)
    }

    let loop: any EventLoop
    private let driver: PipelineDriver
    /// The task, waiting while the slot works on its own.
    private var task: UnsafeContinuation<TaskWork, Never>?
    /// The request under way, to cancel at shutdown, and what its answer is read with.
    private var call: UpdateForwarder.StartedCall?
    /// The request the slot started. It and `call` are kept here until the answer, which the
    /// slot itself receives: a closure carrying them to it would be allocated for every request
    /// (one at each layer it passes), and would copy the request (each of its references retained).
    private var started: CoalescedRequest?
    /// Set while a request starts: an answer that comes at once (a connection that just
    /// closed) is taken in the loop's next turn, so that failing requests do not nest.
    private var starting = false
    /// Set while the slot asks for its next request: one ready then starts at once. A request
    /// handed by anyone else (the intake, another slot's answer) starts in the loop's next turn,
    /// after the work that made it ready, as a resumed task would.
    private var askingForWork = false
    private let cancellation = CancellationFlag()
    /// What the pipeline handed the slot from another thread, or from its loop outside an ask.
    private let mailbox = Mutex<Handed?>(nil)

    init(loop: any EventLoop, driver: PipelineDriver) {
        self.loop = loop
        self.driver = driver
    }

    /// Suspends the calling task, which runs on `loop`, until the slot hands it work; meanwhile
    /// the slot takes and starts requests on its own. Cancelling the task cancels the request
    /// under way, and every later one goes to the task (the forwarder gives them up at once).
    func nextTaskWork() async -> TaskWork {
        await withTaskCancellationHandler {
            await withUnsafeContinuation { continuation in
                if loop.inEventLoop {
                    waitForWork(continuation)
                } else {
                    loop.execute { self.waitForWork(continuation) }
                }
            }
        } onCancel: {
            cancel()
        }
    }

    /// The pipeline hands the slot its next request, or nil: no more will come.
    func hand(_ request: CoalescedRequest?) {
        if loop.inEventLoop, askingForWork {
            run(request)
        } else {
            // Left in the mailbox for the loop's next turn: a closure capturing the request
            // would be allocated for every request handed from elsewhere.
            mailbox.withLock { mailbox in
                precondition(mailbox == nil, "a slot is handed one request at a time")
                mailbox = .handed(request)
            }
            loop.execute { self.runHanded() }
        }
    }

    private func runHanded() {
        guard case .handed(let request)? = mailbox.withLock({ $0.take() }) else {
            preconditionFailure("a slot runs only what it was handed")
        }
        run(request)
    }

    private func waitForWork(_ continuation: UnsafeContinuation<TaskWork, Never>) {
        task = continuation
        takeNext()
    }

    /// Asks the pipeline for the next request; it comes through `hand`, at once when one is ready.
    private func takeNext() {
        whileAskingForWork { driver.pipeline.requestWork(for: self, whenReady: driver.carryOut) }
    }

    /// A request handed during `ask` starts at once on this loop, not queued behind it.
    private func whileAskingForWork(_ ask: () -> Void) {
        askingForWork = true
        ask()
        askingForWork = false
    }

    private func run(_ request: CoalescedRequest?) {
        guard let request else { return handToTask(.end) }
        driver.statistics.requestStarted()
        guard !cancellation.isSet, driver.startsAtOnce(request) else { return handToTask(.attempt(request)) }
        starting = true
        let update = request.update
        started = consume request
        call = driver.forwarder.start(update, answerTo: self)
        starting = false
        if call == nil, let unstarted = started.take() { handToTask(.attempt(unstarted)) }
    }

    /// The answer to the request the slot started, on `loop`. One that comes at once (a
    /// connection that just closed) is taken in the loop's next turn, once `run` has kept the
    /// call, and so that failing requests do not nest.
    public func received(_ result: Result<EgressResponse, any Error>) {
        guard !starting else { return loop.execute { self.received(result) } }
        guard let call, let update = started?.update else { preconditionFailure("an answer comes only for a request the slot started") }
        ended(driver.forwarder.ended(result, of: update, call, cancelled: cancellation.isSet))
    }

    /// How the request the slot started ended.
    private func ended(_ attempt: UpdateForwarder.StartedAttempt) {
        call = nil
        guard let request = started.take() else { preconditionFailure("an answer comes only for a request the slot started") }
        switch attempt {
        case .ended(let delivery):
            // One pass through the state's lock: the answer and the ask for the next request.
            whileAskingForWork { driver.finish(request, delivery, thenServe: self) }
        case .mintAgain(let delivery):
            handToTask(.attempt(request, afterRefusal: delivery))
        case .resend:
            handToTask(.attempt(request, resent: true))
        }
    }

    private func handToTask(_ work: TaskWork) {
        guard let task else { preconditionFailure("a request slot works only while its task waits") }
        self.task = nil
        task.resume(returning: work)
    }

    /// Shutdown ran out of time: the request under way ends, abandoned, and no more start here.
    private func cancel() {
        cancellation.set()
        loop.execute { self.call?.cancel() }
    }
}

/// Set once, read from any thread.
private final class CancellationFlag: Sendable {
    private let flag = Atomic(false)

    var isSet: Bool { flag.load(ordering: .relaxed) }

    func set() { flag.store(true, ordering: .relaxed) }
}
