import CRdKafka
import Foundation
import Logging
import Synchronization

/// A librdkafka producer. `send` resolves once the broker acknowledged the
/// record (per `acks`, default all), which is what the dead-letter path needs
/// before it may count a record as finished; `enqueue` is fire-and-forget for
/// high-rate feeders such as the simulator, with `flush` to wait for delivery.
///
/// Threading: all methods may be called from any thread or task; delivery
/// reports are served by a dedicated poll thread.
public final class KafkaProducer: Sendable {
    private let handle: RDKafkaHandle
    private let context: ProducerContext
    private let pollThreadDone = DispatchSemaphore(value: 0)

    public static let defaultProperties: [String: String] = [
        "acks": "all",
        "enable.idempotence": "true",
        "linger.ms": "5",
    ]

    public init(configuration: KafkaConfiguration, logger: Logger) throws(KafkaError) {
        let properties = Self.defaultProperties.merging(configuration.properties) { _, user in user }
        let conf = try RDKafkaConfig.make(KafkaConfiguration(properties))
        let context = ProducerContext(logger: logger)
        context.attach(to: conf)
        rd_kafka_conf_set_dr_msg_cb(conf) { handle, message, _ in
            guard let message, let opaque = message.pointee._private else { return }
            let delivery = Unmanaged<PendingDelivery>.fromOpaque(opaque).takeRetainedValue()
            delivery.complete(message.pointee.err)
            if let handle, let context = RDKafkaClientContext.from(handle) as? ProducerContext {
                context.deliveryReported()
            }
        }
        self.handle = RDKafkaHandle(pointer: try RDKafkaConfig.makeClient(type: RD_KAFKA_PRODUCER, conf: conf))
        self.context = context
        let thread = Thread { [handle, context, pollThreadDone] in
            while !context.stopRequested.load(ordering: .relaxed) {
                rd_kafka_poll(handle.pointer, 100)
            }
            pollThreadDone.signal()
        }
        thread.name = "kafka-producer-poll"
        thread.start()
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
            delivery.complete(RD_KAFKA_RESP_ERR__TIMED_OUT)
        }
        guard result == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(.produce, "delivery to \(topic) failed: \(RDKafkaConfig.errorName(result))", code: result.rawValue)
        }
    }

    /// Queues one record without waiting for its acknowledgement; delivery failures are
    /// counted in `failedDeliveries`.
    public func enqueue(topic: String, key: [UInt8]?, value: [UInt8], headers: [KafkaHeader] = [],
                        timestampMilliseconds: Int64? = nil) async throws {
        let delivery = PendingDelivery { [context] result in
            if result != RD_KAFKA_RESP_ERR_NO_ERROR { context.failedDeliveries.add(1, ordering: .relaxed) }
        }
        try await produce(topic: topic, key: key, value: value, headers: headers,
                          timestampMilliseconds: timestampMilliseconds, delivery: delivery)
    }

    public var failedDeliveries: Int { context.failedDeliveries.load(ordering: .relaxed) }

    /// Waits until every queued record is delivered or failed. Returns false on timeout.
    @discardableResult
    public func flush(timeout: Duration = .seconds(30)) async -> Bool {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async { [handle] in
                let result = rd_kafka_flush(handle.pointer, RDKafkaQueries.milliseconds(timeout))
                continuation.resume(returning: result == RD_KAFKA_RESP_ERR_NO_ERROR)
            }
        }
    }

    /// Flushes what is queued (up to `timeout`) and releases librdkafka.
    public func close(timeout: Duration = .seconds(10)) async {
        await flush(timeout: timeout)
        context.stopRequested.store(true, ordering: .relaxed)
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async { [handle, pollThreadDone] in
                pollThreadDone.wait()
                rd_kafka_destroy(handle.pointer)
                continuation.resume()
            }
        }
    }

    /// Hands one record to librdkafka. A full local queue suspends the task until a
    /// delivery report frees room; no thread sleeps.
    private func produce(topic: String, key: [UInt8]?, value: [UInt8], headers: [KafkaHeader],
                         timestampMilliseconds: Int64?, delivery: PendingDelivery) async throws {
        while true {
            let reportsSeen = context.deliveryReports.load(ordering: .acquiring)
            let error = produceOnce(topic: topic, key: key, value: value, headers: headers,
                                    timestampMilliseconds: timestampMilliseconds, delivery: delivery)
            if error == RD_KAFKA_RESP_ERR_NO_ERROR { return }
            guard error == RD_KAFKA_RESP_ERR__QUEUE_FULL else {
                throw KafkaError(.produce, "cannot produce to \(topic): \(RDKafkaConfig.errorName(error))", code: error.rawValue)
            }
            try await context.waitForDeliveryReport(after: reportsSeen)
        }
    }

    /// One attempt; on failure librdkafka did not take the record and `delivery` stays unreferenced.
    private func produceOnce(topic: String, key: [UInt8]?, value: [UInt8], headers: [KafkaHeader],
                             timestampMilliseconds: Int64?, delivery: PendingDelivery) -> rd_kafka_resp_err_t {
        let opaque = Unmanaged.passRetained(delivery).toOpaque()
        let error = RDKafkaProduce.produce(handle.pointer, topic: topic, key: key, value: value,
                                           headers: headers, timestampMilliseconds: timestampMilliseconds, opaque: opaque)
        if error != RD_KAFKA_RESP_ERR_NO_ERROR { Unmanaged<PendingDelivery>.fromOpaque(opaque).release() }
        return error
    }
}

/// The completion of one produced record; retained by librdkafka's message
/// opaque until its delivery report. Completes once: later reports are ignored.
final class PendingDelivery: Sendable {
    private enum State {
        case pending
        case waiting(CheckedContinuation<rd_kafka_resp_err_t, Never>)
        case callback(@Sendable (rd_kafka_resp_err_t) -> Void)
        case finished(rd_kafka_resp_err_t)
    }

    private let state: Mutex<State>

    init() {
        state = Mutex(.pending)
    }

    init(_ callback: @escaping @Sendable (rd_kafka_resp_err_t) -> Void) {
        state = Mutex(.callback(callback))
    }

    func complete(_ result: rd_kafka_resp_err_t) {
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

    func wait() async -> rd_kafka_resp_err_t {
        await withCheckedContinuation { continuation in
            let finished: rd_kafka_resp_err_t? = state.withLock { state in
                if case .finished(let result) = state { return result }
                state = .waiting(continuation)
                return nil
            }
            if let finished { continuation.resume(returning: finished) }
        }
    }
}

final class ProducerContext: RDKafkaClientContext, @unchecked Sendable {
    let failedDeliveries = Atomic<Int>(0)
    let stopRequested = Atomic<Bool>(false)
    /// Delivery reports served so far: each frees room in the local queue.
    let deliveryReports = Atomic<UInt64>(0)
    private let roomWaiters = Mutex<[UInt64: CheckedContinuation<Void, any Error>]>([:])
    private let nextWaiter = Atomic<UInt64>(0)

    /// On the poll thread, after each delivery report.
    func deliveryReported() {
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
