import FleetAuth
import FleetEngine
import Logging

/// How a request ended for its records.
public enum DeliveryOutcome: Sendable, Equatable {
    case accepted
    /// Fleet Engine refused it for good: dead-letter the records with this reason.
    case rejected(reason: String, detail: String)
    /// Shutdown interrupted it, or its partitions moved to another consumer: leave
    /// the records unfinished (consumed again by whoever owns them next).
    case abandoned
}

/// Sends one update with its vehicle's token, retrying transient failures with
/// backoff for as long as the task runs (Fleet Engine being down is no reason to
/// drop data) and re-minting once on 401/403.
public struct UpdateForwarder: Sendable {
    let client: FleetEngineClient
    let tokens: TokenCache
    let retryPolicy: RetryPolicy
    let retryDeadline: Duration?
    let statistics: RelayStatistics
    let logger: Logger

    public init(client: FleetEngineClient, tokens: TokenCache, retryPolicy: RetryPolicy, retryDeadline: Duration? = nil,
                statistics: RelayStatistics, logger: Logger) {
        self.client = client
        self.tokens = tokens
        self.retryPolicy = retryPolicy
        self.retryDeadline = retryDeadline
        self.statistics = statistics
        self.logger = logger
    }

    /// - Parameter stillOwned: false once the records' partitions were revoked: retrying
    ///   then would race the new owner and could move the vehicle backwards.
    public func deliver(_ update: VehicleLocationUpdate, stillOwned: () -> Bool = { true }) async -> DeliveryOutcome {
        var reauthenticated = false
        var attempt = 0
        let giveUpAt = retryDeadline.map { ContinuousClock.now + $0 }
        var lastCause = ""
        while !Task.isCancelled, stillOwned() {
            if let giveUpAt, attempt > 0, ContinuousClock.now >= giveUpAt {
                return .rejected(reason: "retry_deadline_exceeded",
                                 detail: "Gave up after \(attempt) retries within the retry deadline; last cause: \(lastCause).")
            }
            let token: String
            do {
                token = try await tokens.token(for: update.vehicle)
            } catch {
                logger.warning("No token for \(update.vehicle): \(error)")
                lastCause = "signer: \(error)"
                guard await backOff(attempt: &attempt, retryAfter: nil, cause: "signer") else { break }
                continue
            }
            let response = await client.send(update, token: token)
            switch response.outcome {
            case .accepted:
                statistics.requestsAccepted.add(1, ordering: .relaxed)
                return .accepted
            case .unauthenticated, .permissionDenied:
                statistics.requestsFailed.add(1, ordering: .relaxed)
                if reauthenticated {
                    return .rejected(reason: response.outcome.deadLetterReason, detail: Self.detail(response))
                }
                reauthenticated = true
                await tokens.invalidate(update.vehicle)
                statistics.retries.add(1, ordering: .relaxed)
            case .rejected(let reason):
                statistics.requestsFailed.add(1, ordering: .relaxed)
                return .rejected(reason: reason, detail: Self.detail(response))
            case .transient(let cause, let retryAfter):
                statistics.requestsFailed.add(1, ordering: .relaxed)
                logger.debug("Fleet Engine \(cause) for \(update.vehicle); retrying")
                lastCause = cause
                guard await backOff(attempt: &attempt, retryAfter: retryAfter, cause: cause) else { break }
            }
        }
        return .abandoned
    }

    /// Sleeps before the next attempt; false when the task was cancelled meanwhile.
    private func backOff(attempt: inout Int, retryAfter: Double?, cause: String) async -> Bool {
        let delay = retryPolicy.delay(attempt: attempt, retryAfterSeconds: retryAfter)
        attempt += 1
        statistics.retries.add(1, ordering: .relaxed)
        do {
            try await Task.sleep(for: delay)
            return true
        } catch {
            return false
        }
    }

    private static func detail(_ response: FleetEngineClient.Response) -> String {
        "Fleet Engine answered \(response.status): \(response.message)"
    }
}
