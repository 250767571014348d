import FleetAuth
import FleetEngine
import Logging
import Synchronization

/// What `/healthz` and `/readyz` report: whether the relay's loops are alive, it
/// has joined its group, its signer works and Fleet Engine answers.
///
/// Threading: every method may be called from any thread.
public final class RelayHealth: Sendable {
    public struct Check: Sendable, Equatable {
        public let name: String
        public let ok: Bool
        public let detail: String
    }

    private struct State {
        var joinedGroup = false
        /// When the group took the partitions away (session timeout, fenced) and the relay has not rejoined since.
        var membershipLostSince: ContinuousClock.Instant?
        /// The latest consume error since the last record consumed, how many there were, and since when.
        var consumeError: (name: String, count: Int, since: ContinuousClock.Instant)?
        /// Since when Fleet Engine fails for most vehicles, while it does.
        var fleetEngineOutageSince: ContinuousClock.Instant?
        /// The failure that began the outage, for `/readyz`.
        var fleetEngineFailure: (cause: FailureCause, detail: String)?
        var signerFailingSince: ContinuousClock.Instant?
        /// The last failure's configuration cause and message, while it lasts.
        var signerConfigurationFailure: String?
        var lastPollAge: @Sendable () -> Double = { 0 }
        var deadLetterFailure: DeadLetterFailure?
        /// Why records wait for the Schema Registry, and since when, while they do.
        var schemaRegistryWait: (reason: String, since: ContinuousClock.Instant)?
    }

    private struct DeadLetterFailure {
        let topic: String
        var reason: String
        var permanent: Bool
        let since: ContinuousClock.Instant
    }

    /// A poll loop silent for longer than this makes the process unhealthy.
    public static let stuckPollSeconds = 30.0

    public let maximumOutage: Duration
    private let state = Mutex(State())
    private let logger: Logger

    public init(maximumOutage: Duration = .seconds(60), logger: Logger = Logger(label: "fleet-relay")) {
        self.maximumOutage = maximumOutage
        self.logger = logger
    }

    /// The consumer's poll loop, read at each probe: when it last came round.
    public func watchPollLoop(secondsSinceLastPoll: @escaping @Sendable () -> Double) {
        state.withLock { $0.lastPollAge = secondsSinceLastPoll }
    }

    /// Records wait for their schema because the Schema Registry cannot be asked (`reason`), or
    /// no longer do (nil): not ready once they waited longer than the outage limit; alive throughout.
    func recordSchemaRegistryUnavailable(_ reason: String?, now: ContinuousClock.Instant = .now) {
        state.withLock { state in
            state.schemaRegistryWait = reason.map { ($0, state.schemaRegistryWait?.since ?? now) }
        }
    }

    func recordJoinedGroup() {
        state.withLock { state in
            state.joinedGroup = true
            state.membershipLostSince = nil
        }
    }

    /// The group took the partitions away: not a member until the next assignment.
    func recordMembershipLost(now: ContinuousClock.Instant = .now) {
        state.withLock { state in
            state.joinedGroup = false
            if state.membershipLostSince == nil { state.membershipLostSince = now }
        }
    }

    /// Kafka reported an error instead of records (an unknown or unauthorized topic, a fatal
    /// client error). Readiness fails until records are consumed again.
    func recordConsumeError(_ name: String, now: ContinuousClock.Instant = .now) {
        state.withLock { state in
            state.consumeError = (name, (state.consumeError?.count ?? 0) + 1, state.consumeError?.since ?? now)
        }
    }

    func recordRecordsConsumed() {
        state.withLock { $0.consumeError = nil }
    }


    /// Fleet Engine began or stopped failing for most vehicles (decided by the pipeline from the
    /// share of vehicles waiting to retry, so a few refused vehicles are no outage and one answer
    /// neither starts nor ends one): logs one line when an outage begins, with its reason, and
    /// one when it ends.
    func recordFleetEngineOutage(_ change: FleetEngineOutageChange, now: ContinuousClock.Instant = .now) {
        switch change {
        case .began(let failing, let vehicles, let failure):
            state.withLock { state in
                state.fleetEngineOutageSince = now
                state.fleetEngineFailure = (failure.cause, failure.detail)
            }
            logger.warning("Fleet Engine outage began (\(failure.cause)\(failure.detail.isEmpty ? "" : ": " + failure.detail)): \(failing) of \(vehicles) vehicles wait to retry, each with backoff")
        case .ended(let lasted):
            state.withLock { state in
                state.fleetEngineOutageSince = nil
                state.fleetEngineFailure = nil
            }
            logger.notice("Fleet Engine outage ended after \(lasted.components.seconds) s")
        }
    }

    /// A mint failed. One whose way to the signer failed for a configuration cause (the TLS
    /// trust, the proxy) makes the relay not ready at once, naming it, as for Fleet Engine.
    func recordSignerFailure(_ error: SignerError?) {
        state.withLock { state in
            if state.signerFailingSince == nil { state.signerFailingSince = .now }
            if let error, let cause = error.transportCause, FailureCause(rawValue: cause)?.isConfiguration == true {
                state.signerConfigurationFailure = "\(cause): \(error.message)"
            } else {
                state.signerConfigurationFailure = nil
            }
        }
    }

    func recordSignerSuccess() {
        state.withLock { state in
            state.signerFailingSince = nil
            state.signerConfigurationFailure = nil
        }
    }

    /// A dead letter could not be written. Returns true when this is the first permanent
    /// refusal since the last success: the caller logs it once, with its reason.
    func recordDeadLetterFailure(topic: String, reason: String, permanent: Bool) -> Bool {
        state.withLock { state in
            let wasPermanent = state.deadLetterFailure?.permanent ?? false
            if state.deadLetterFailure == nil {
                state.deadLetterFailure = DeadLetterFailure(topic: topic, reason: reason, permanent: permanent, since: .now)
            } else {
                state.deadLetterFailure!.reason = reason
                state.deadLetterFailure!.permanent = permanent || wasPermanent
            }
            return permanent && !wasPermanent
        }
    }

    /// A dead letter was written. Returns true when writes had been failing.
    func recordDeadLetterWritten() -> Bool {
        state.withLock { state in
            defer { state.deadLetterFailure = nil }
            return state.deadLetterFailure != nil
        }
    }

    /// Liveness: the poll loop came round recently. It fails only for what a restart mends: a
    /// loop that stopped coming round. Outages of Fleet Engine, the signer, the Schema Registry
    /// or the dead-letter topic are readiness matters: restarting every replica mends none.
    public var liveness: [Check] {
        let age = state.withLock { $0.lastPollAge }()
        return [Check(name: "kafka_poll_loop", ok: age <= Self.stuckPollSeconds, detail: "last poll \(Int(age)) s ago")]
    }

    /// Readiness: joined the group (an empty assignment counts) and not thrown out of it since,
    /// Kafka not answering consume errors since the last record, records not waiting to be
    /// taken in (their schema) for longer than the outage limit, the signer not failing for
    /// longer than the outage limit, and Fleet Engine not in a longer outage.
    public var readiness: [Check] {
        let now = ContinuousClock.now
        let current = state.withLock { $0 }
        let signerFailing = current.signerFailingSince
        return liveness + [
            groupCheck(current, now: now),
            consumeCheck(current, now: now),
            schemaRegistryCheck(current.schemaRegistryWait, now: now),
            signerCheck(since: signerFailing, configurationFailure: current.signerConfigurationFailure, now: now),
            fleetEngineCheck(since: current.fleetEngineOutageSince, failure: current.fleetEngineFailure, now: now),
            deadLetterCheck(current.deadLetterFailure, now: now),
        ]
    }

    private func signerCheck(since: ContinuousClock.Instant?, configurationFailure: String?, now: ContinuousClock.Instant) -> Check {
        guard let since else { return Check(name: "signer", ok: true, detail: "ok") }
        let seconds = (now - since).components.seconds
        if let configurationFailure {
            return Check(name: "signer", ok: false, detail: "failing for \(seconds) s (\(configurationFailure))")
        }
        return Check(name: "signer", ok: now - since <= maximumOutage, detail: "failing for \(seconds) s")
    }

    private func schemaRegistryCheck(_ waiting: (reason: String, since: ContinuousClock.Instant)?, now: ContinuousClock.Instant) -> Check {
        guard let waiting else { return Check(name: "schema_registry", ok: true, detail: "ok") }
        return Check(name: "schema_registry", ok: now - waiting.since <= maximumOutage,
                     detail: "records wait for their schema for \((now - waiting.since).components.seconds) s, fetching paused (\(waiting.reason))")
    }

    private func groupCheck(_ state: State, now: ContinuousClock.Instant) -> Check {
        let detail = if state.joinedGroup {
            "joined"
        } else if let lost = state.membershipLostSince {
            "membership lost \((now - lost).components.seconds) s ago; rejoining"
        } else {
            "not joined yet"
        }
        return Check(name: "consumer_group", ok: state.joinedGroup, detail: detail)
    }

    private func consumeCheck(_ state: State, now: ContinuousClock.Instant) -> Check {
        guard let error = state.consumeError else { return Check(name: "kafka_consume", ok: true, detail: "ok") }
        return Check(name: "kafka_consume", ok: false,
                     detail: "\(error.count) consume errors in \((now - error.since).components.seconds) s and no record since, latest: \(error.name)")
    }

    private func fleetEngineCheck(since: ContinuousClock.Instant?, failure: (cause: FailureCause, detail: String)?,
                                  now: ContinuousClock.Instant) -> Check {
        guard let since else { return Check(name: "fleet_engine", ok: true, detail: "ok") }
        let seconds = (now - since).components.seconds
        guard let failure else { return Check(name: "fleet_engine", ok: now - since <= maximumOutage, detail: "unavailable for \(seconds) s") }
        // No retry mends a certificate the relay does not trust, a proxy that refuses the tunnel,
        // or HTTP/1.1 where HTTP/2 is required: not ready at once instead of after the outage limit.
        let misconfigured = failure.cause.isConfiguration
        return Check(name: "fleet_engine", ok: !misconfigured && now - since <= maximumOutage,
                     detail: "unavailable for \(seconds) s (\(failure.cause)\(failure.detail.isEmpty ? "" : ": " + failure.detail))")
    }

    /// A permanent refusal fails at once (nothing drains until an operator acts); other
    /// failures only once they outlast the outage limit.
    private func deadLetterCheck(_ failure: DeadLetterFailure?, now: ContinuousClock.Instant) -> Check {
        guard let failure else { return Check(name: "dead_letter_topic", ok: true, detail: "ok") }
        let seconds = (now - failure.since).components.seconds
        return Check(name: "dead_letter_topic", ok: !failure.permanent && now - failure.since <= maximumOutage,
                     detail: "\(failure.topic) refuses records (\(failure.reason)) for \(seconds) s")
    }
}
