import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// A librdkafka producer, a `Service`: `run()` owns the thread that serves delivery reports.
/// `send` resolves once the broker acknowledged the record (per `acks`, default all), which
/// is what the dead-letter path needs before it may count a record as finished; `enqueue`
/// is fire-and-forget for high-rate feeders such as the simulator, with `flush` to wait
/// for delivery. `KafkaProducer.run(configuration:logger:_:)` runs one around a body.
///
/// Threading: all methods may be called from any thread or task.
public final class KafkaProducer: Service, Sendable {
    private let client: RDKafkaClient
    private let context: ProducerContext
    private let pollThread: PollThread

    public static let defaultProperties: [String: String] = [
        "acks": "all",
        "enable.idempotence": "true",
        "linger.ms": "5",
    ]

    public init(configuration: KafkaConfiguration, logger: Logger) throws(KafkaError) {
        let properties = Self.defaultProperties.merging(configuration.properties) { _, user in user }
        let context = ProducerContext(logger: logger)
        let client = try RDKafkaClient(.producer, configuration: KafkaConfiguration(properties), context: context)
        self.client = client
        self.context = context
        self.pollThread = PollThread(name: "kafka-producer") { client.wakePoll() }
    }

    /// Runs the producer for the duration of `body`; afterwards what is queued is flushed
    /// (up to `flushTimeout`) and the producer stops.
    public func whileRunning<Result: Sendable>(
        flushTimeout: Duration = .seconds(30), _ body: () async throws -> Result
    ) async throws -> Result {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await self.run() }
            do {
                let result = try await body()
                await close(timeout: flushTimeout)
                return result
            } catch {
                await close(timeout: flushTimeout)
                throw error
            }
        }
    }

    /// A new producer, running for the duration of `body` (see `whileRunning`).
    public static func run<Result: Sendable>(
        configuration: KafkaConfiguration, logger: Logger, flushTimeout: Duration = .seconds(30),
        _ body: (KafkaProducer) async throws -> Result
    ) async throws -> Result {
        let producer = try KafkaProducer(configuration: configuration, logger: logger)
        return try await producer.whileRunning(flushTimeout: flushTimeout) { try await body(producer) }
    }

    /// Serves delivery reports until `close()` or until the task is cancelled. The poll
    /// thread lives exactly as long as this call; it waits in librdkafka for the next
    /// report, a flush asked for or the stop, which wake it: an idle producer costs no wakeup.
    public func run() async {
        await pollThread.run { [client, context, pollThread] in
            while pollThread.isPolling {
                client.servePoll()
                context.serveFlushes(client)
            }
            context.serveFlushes(client, closing: true)
        }
    }

    /// Produces one record and waits for the broker's acknowledgement. Cancelling
    /// the task stops the wait (the record may still be delivered).
    /// - Parameter timestampMilliseconds: the record's CreateTime; nil: now.
    public func send(topic: String, key: [UInt8]?, value: [UInt8], headers: [KafkaHeader] = [],
                     timestampMilliseconds: Int64? = nil) async throws {
        let delivery = PendingDelivery()
        try await produce(topic: topic, key: key, value: value, headers: headers,
                          timestampMilliseconds: timestampMilliseconds, delivery: delivery)
        let result = await withTaskCancellationHandler {
            await delivery.wait()
        } onCancel: {
            delivery.complete(RDKafkaClient.timedOut)
        }
        guard result == 0 else {
            throw KafkaError(.produce, "delivery to \(topic) failed: \(RDKafkaClient.errorName(result))", code: result)
        }
    }

    /// Queues one record without waiting for its acknowledgement; delivery failures are
    /// counted in `failedDeliveries`.
    public func enqueue(topic: String, key: [UInt8]?, value: [UInt8], headers: [KafkaHeader] = [],
                        timestampMilliseconds: Int64? = nil) async throws {
        let delivery = PendingDelivery { [context] result in
            if result != 0 { context.failedDeliveries.add(1, ordering: .relaxed) }
        }
        try await produce(topic: topic, key: key, value: value, headers: headers,
                          timestampMilliseconds: timestampMilliseconds, delivery: delivery)
    }

    public var failedDeliveries: Int { context.failedDeliveries.load(ordering: .relaxed) }

    /// Waits until every queued record is delivered or failed. Returns false on timeout. The
    /// poll thread flushes (librdkafka's flush blocks, serving delivery reports) within one
    /// round of its loop, once it runs; a producer that stopped can only say whether nothing
    /// is queued.
    @discardableResult
    public func flush(timeout: Duration = .seconds(30)) async -> Bool {
        guard !pollThread.hasEnded else { return client.flush(timeout: .zero) }
        return await withCheckedContinuation { continuation in
            if context.requestFlush(timeout: timeout, continuation) {
                client.wakePoll()
            } else {
                continuation.resume(returning: client.flush(timeout: .zero))  // the poll thread just ended
            }
        }
    }

    /// Flushes what is queued (up to `timeout`) and stops `run()`. librdkafka is released
    /// with the last reference.
    public func close(timeout: Duration = .seconds(10)) async {
        await flush(timeout: timeout)
        await pollThread.stop()
    }

    /// Hands one record to librdkafka. A full local queue suspends the task until a
    /// delivery report frees room; no thread sleeps.
    private func produce(topic: String, key: [UInt8]?, value: [UInt8], headers: [KafkaHeader],
                         timestampMilliseconds: Int64?, delivery: PendingDelivery) async throws {
        while true {
            let reportsSeen = context.deliveryReports.load(ordering: .acquiring)
            let opaque = Unmanaged.passRetained(delivery).toOpaque()
            guard let error = client.produce(topic: topic, key: key, value: value, headers: headers,
                                             timestampMilliseconds: timestampMilliseconds, opaque: opaque) else { return }
            // librdkafka did not take the record: `delivery` stays unreferenced by it.
            Unmanaged<PendingDelivery>.fromOpaque(opaque).release()
            guard error.code == RDKafkaClient.queueFull else { throw error }
            try await context.waitForDeliveryReport(after: reportsSeen)
        }
    }
}

/// The completion of one produced record; retained by librdkafka's message
/// opaque until its delivery report. Completes once: later reports are ignored.
final class PendingDelivery: Sendable {
    private enum State {
        case pending
        case waiting(CheckedContinuation<Int32, Never>)
        case callback(@Sendable (Int32) -> Void)
        case finished(Int32)
    }

    private let state: Mutex<State>

    init() {
        state = Mutex(.pending)
    }

    init(_ callback: @escaping @Sendable (Int32) -> Void) {
        state = Mutex(.callback(callback))
    }

    func complete(_ result: Int32) {
        let previous = state.withLock { state in
            defer { if case .finished = state {} else { state = .finished(result) } }
            return state
        }
        switch previous {
        case .waiting(let continuation): continuation.resume(returning: result)
        case .callback(let callback): callback(result)
        case .pending, .finished: break
        }
    }

    func wait() async -> Int32 {
        await withCheckedContinuation { continuation in
            let finished: Int32? = state.withLock { state in
                if case .finished(let result) = state { return result }
                state = .waiting(continuation)
                return nil
            }
            if let finished { continuation.resume(returning: finished) }
        }
    }
}

/// Unchecked like its base class: every stored property is atomic or a lock-guarded value.
final class ProducerContext: RDKafkaClientContext, RDKafkaDeliveryHandling, @unchecked Sendable {

    let failedDeliveries = Atomic<Int>(0)
    /// Flushes asked for, served on the poll thread; none is taken once it ended.
    private let flushes = Mutex<(requests: [(timeout: Duration, waiter: CheckedContinuation<Bool, Never>)], closed: Bool)>(([], false))

    /// False when the poll thread has ended: the caller answers the waiter itself.
    func requestFlush(timeout: Duration, _ waiter: CheckedContinuation<Bool, Never>) -> Bool {
        flushes.withLock { flushes in
            guard !flushes.closed else { return false }
            flushes.requests.append((timeout, waiter))
            return true
        }
    }

    /// On the poll thread: the flushes asked for since the last round, each answered once done;
    /// `closing` on its way out, after which none is taken.
    func serveFlushes(_ client: RDKafkaClient, closing: Bool = false) {
        let requests = flushes.withLock { flushes in
            flushes.closed = flushes.closed || closing
            defer { flushes.requests = [] }
            return flushes.requests
        }
        for flush in requests { flush.waiter.resume(returning: client.flush(timeout: flush.timeout)) }
    }
    /// Delivery reports served so far: each frees room in the local queue.
    let deliveryReports = Atomic<UInt64>(0)
    private let roomWaiters = Mutex<[UInt64: CheckedContinuation<Void, any Error>]>([:])
    private let nextWaiter = Atomic<UInt64>(0)

    /// On the poll thread: one produced record's delivery report.
    func delivered(_ opaque: UnsafeMutableRawPointer, result: Int32) {
        Unmanaged<PendingDelivery>.fromOpaque(opaque).takeRetainedValue().complete(result)
        deliveryReported()
    }

    private func deliveryReported() {
        deliveryReports.add(1, ordering: .releasing)
        let waiters = roomWaiters.withLock { waiters in
            defer { waiters = [:] }
            return waiters
        }
        waiters.values.forEach { $0.resume() }
    }

    /// Suspends until a delivery report after the `seen`-th one, or throws when cancelled.
    func waitForDeliveryReport(after seen: UInt64) async throws {
        let id = nextWaiter.add(1, ordering: .relaxed).newValue
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                // Checked under the lock `deliveryReported` drains under: no report is missed.
                let outcome: Result<Void, any Error>? = roomWaiters.withLock { waiters in
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if deliveryReports.load(ordering: .acquiring) != seen { return .success(()) }
                    waiters[id] = continuation
                    return nil
                }
                if let outcome { continuation.resume(with: outcome) }
            }
        } onCancel: {
            roomWaiters.withLock { $0.removeValue(forKey: id) }?.resume(throwing: CancellationError())
        }
    }
}
