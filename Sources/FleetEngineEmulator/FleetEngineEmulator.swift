import FleetAuth
import FleetEngine
import FleetModel
import HTTPServing
import JSON
import Synchronization

/// A Fleet Engine stand-in for tests, demos and local development. It serves
/// the two update endpoints and the two vehicle `GET`s, checks every token
/// exactly as jwt.md says, validates bodies, and keeps each vehicle's state.
///
/// Threading: all methods may be called from any task; state is behind a mutex.
public final class FleetEngineEmulator: EmulatedService {
    /// A vehicle as the emulator holds it.
    public struct Vehicle: Sendable {
        public var lastLocation: JSONValue
        /// Time of `lastLocation`, milliseconds since the epoch.
        public var locationTimeMilliseconds: Int64
        public var updates = 0
        public var pastLocationsReceived = 0
        /// Accepted updates whose `lastLocation` was older than the one held: a relay bug.
        public var backwardsUpdates = 0
        /// Every fix time received for the vehicle (last and past locations), when
        /// the emulator records history: lets tests prove that nothing was lost.
        public var receivedFixTimes: Set<Int64> = []
        /// When each fix time first arrived in an accepted update (when the emulator records
        /// history): tests time how soon a request left unprocessed was sent again.
        public var fixFirstReceived: [Int64: ContinuousClock.Instant] = [:]
        /// Fixes received for the first time although a newer one had already arrived
        /// (when the emulator records history): a history delivered out of order.
        public var fixesOutOfOrder = 0
        /// When each accepted update was handled (when the emulator records history): the
        /// spacing of one vehicle's requests.
        public var acceptedUpdateTimes: [ContinuousClock.Instant] = []
        var newestReceivedFixTime = Int64.min
    }

    /// Counters over every request served.
    public struct Statistics: Sendable {
        public var requests = 0
        /// Calls that came over gRPC, counted as they are answered (each also counted, as the REST request it stands for, below).
        public var grpcCalls = 0
        public var responsesByStatus: [Int: Int] = [:]
        /// Update requests (PUT/PATCH) and how each was answered.
        public var updateRequests = 0
        public var updateResponsesByStatus: [Int: Int] = [:]
        public var locationsReceived = 0
        /// When the first and the latest update request arrived: rate-limit checks measure here.
        public var firstUpdateAt: ContinuousClock.Instant?
        public var lastUpdateAt: ContinuousClock.Instant?
        /// Updates that arrived while another update of the same vehicle was still open: two
        /// relays sending for one vehicle at once, which a revoke must rule out.
        public var overlappingUpdates = 0
        /// Requests refused because their token's `exp` had passed: a relay handing out expired tokens.
        public var expiredTokens = 0
        /// Updates applied although their client had gone away (`appliesAbandonedUpdates`).
        public var abandonedUpdatesApplied = 0
        /// Update requests answered 503 per vehicle of `FaultPlan.unavailableVehicles`: how often
        /// a relay tries a vehicle that keeps failing.
        public var unavailableVehicleRequests: [String: Int] = [:]
    }

    /// Faults applied to every update request, by chance or by vehicle.
    public struct FaultPlan: Sendable {
        /// Share of update requests answered 503 UNAVAILABLE.
        public var failRate: Double
        /// Share of update requests answered 429 RESOURCE_EXHAUSTED with `Retry-After: 1`.
        public var throttleRate: Double
        /// Delay added before answering each request.
        public var latency: Duration
        /// Vehicles answered 404 NOT_FOUND.
        public var rejectedVehicles: Set<String>
        /// Vehicles whose updates are answered 503 UNAVAILABLE every time: a vehicle stuck in retries.
        public var unavailableVehicles: Set<String>
        /// Delay before an update (not a read) is applied: a slow backend. An update whose client
        /// closes the connection meanwhile is dropped unapplied, unless `appliesAbandonedUpdates`.
        public var updateLatency: Duration
        /// A slow update is applied at the end of its latency even when its client went away
        /// (reset the stream, closed the connection): a reset tells the client nothing about
        /// whether the server applied the update.
        public var appliesAbandonedUpdates: Bool
        /// Answers every vehicle read (`GET`) with this status, as Fleet Engine does for a token
        /// whose role may update but not read (403), while updates go on being served.
        public var vehicleReadStatus: Int?
        /// The project's quota: requests (reads and updates) per second through a token bucket
        /// holding one second's worth; past it, 429 RESOURCE_EXHAUSTED without `Retry-After`, as
        /// Google's APIs answer. nil: no quota.
        public var quotaPerSecond: Double?

        public init(failRate: Double = 0, throttleRate: Double = 0, latency: Duration = .zero,
                    rejectedVehicles: Set<String> = [], unavailableVehicles: Set<String> = [],
                    updateLatency: Duration = .zero, appliesAbandonedUpdates: Bool = false, vehicleReadStatus: Int? = nil,
                    quotaPerSecond: Double? = nil) {
            self.quotaPerSecond = quotaPerSecond
            self.appliesAbandonedUpdates = appliesAbandonedUpdates
            self.vehicleReadStatus = vehicleReadStatus
            self.updateLatency = updateLatency
            self.failRate = failRate
            self.throttleRate = throttleRate
            self.latency = latency
            self.rejectedVehicles = rejectedVehicles
            self.unavailableVehicles = unavailableVehicles
        }
    }

    /// A fault to answer instead of processing, for retry tests.
    public struct InjectedFault: Sendable {
        public var status: Int
        public var retryAfter: String?
        public init(status: Int, retryAfter: String? = nil) {
            self.status = status
            self.retryAfter = retryAfter
        }
    }

    private struct State {
        var vehicles: [VehicleIdentity: Vehicle] = [:]
        var statistics = Statistics()
        var faults: [InjectedFault] = []
        var plan = FaultPlan()
        var downUntil: ContinuousClock.Instant?
        var quota = QuotaBucket()
        var receivedTokens: Set<String> = []
        /// Tokens answered 401 although valid: withdrawn, as when their key was rotated.
        var revokedTokens: Set<String> = []
        /// Receipt time minus `lastLocation` time of accepted updates, since the last reset.
        var latency = LatencyHistogram()
        /// Only fixes located at or after this time count toward the latency (a warm measurement).
        var latencyLocatedAfter = Int64.min
        /// Update requests received and not yet answered, by path (one path per vehicle).
        var openUpdates: [String: Int] = [:]
    }

    public let provider: String
    public let requireExistingVehicles: Bool
    public let recordsHistory: Bool
    private let verifier: TokenVerifier
    private let state = Mutex(State())
    private let server = Mutex<HTTPServer?>(nil)
    /// Makes the connections open at a moment go silent (`silenceOpenConnections`).
    public let path = SilentPath()
    /// The server name each TLS client asked for.
    public let serverNames = ServerNames()

    /// - Parameters:
    ///   - key: the service account whose tokens are accepted (its public half verifies them).
    ///   - requireExistingVehicles: answer 404 for vehicles not created with `createVehicle`,
    ///     as Fleet Engine does; off by default so demos need no provisioning step.
    ///   - recordsHistory: keep every received fix time per vehicle (tests; memory grows with traffic).
    public init(key: ServiceAccountKey, provider: String, requireExistingVehicles: Bool = false,
                recordsHistory: Bool = false, clock: @escaping EpochClock = systemEpochClock) {
        self.provider = provider
        self.requireExistingVehicles = requireExistingVehicles
        self.recordsHistory = recordsHistory
        self.verifier = TokenVerifier(publicKey: key.privateKey, keyId: key.privateKeyId,
                                      serviceAccount: key.clientEmail, remembersSignatures: true, clock: clock)
    }

    /// Starts serving on `host:port` (0 picks a free port) and returns the base URL.
    @discardableResult
    public func start(host: String = "127.0.0.1", port: Int = 0, options: EmulatorOptions = .init()) async throws -> String {
        let server = try await EmulatorHost.start([self], host: host, port: port, options: options, path: path,
                                                  serverNames: serverNames)
        self.server.withLock { $0 = server }
        return server.baseURL
    }

    /// Serves `/v1/providers/…`, the same calls over gRPC (chosen by content type), and its own
    /// `/_emulator/…` statistics; other paths belong to other emulated services.
    public func respond(to request: HTTPRequest) async -> HTTPResponse? {
        guard let call = call(request) else { return nil }
        switch call {
        case .administration: return administer(request)
        case .refused(let refusal): return answer(refusal, to: request, grpc: nil)
        case .fleetEngine(let rest, let grpc): return answer(await serve(rest), to: request, grpc: grpc)
        }
    }

    /// Without a planned latency, every Fleet Engine call is answered on the event loop it
    /// arrived on: the emulator's cost per request (it shares the machine with the relay in a
    /// benchmark) is then that of the work alone. Its own `/_emulator/` calls go the task's way.
    public func respondAtOnce(to request: HTTPRequest) -> ImmediateAnswer {
        guard let call = call(request) else { return .notOwned }
        switch call {
        case .administration:
            return .mustWait
        case .refused(let refusal):
            return .answer(answer(refusal, to: request, grpc: nil))
        case .fleetEngine(let rest, let grpc):
            let plan = state.withLock { $0.plan }
            guard plan.latency == .zero, plan.updateLatency == .zero else { return .mustWait }
            return .answer(answer(serveAtOnce(rest), to: request, grpc: grpc))
        }
    }

    /// What a request asks of the emulator.
    private enum Call {
        /// Its own `/_emulator/…` statistics and controls.
        case administration
        /// A Fleet Engine call: a REST request, or the one a gRPC call stands for.
        case fleetEngine(HTTPRequest, grpc: GRPCCalls.Translated?)
        /// A gRPC call that stands for no REST request, and the answer refusing it.
        case refused(HTTPResponse)
    }

    /// What `request` asks of the emulator; nil for a path of another service.
    private func call(_ request: HTTPRequest) -> Call? {
        if request.path.hasPrefix("/_emulator/") { return .administration }
        if GRPCCalls.isCall(request) {
            switch GRPCCalls.restRequest(for: request) {
            case .success(let translated): return .fleetEngine(translated.rest, grpc: translated)
            case .failure(let failure): return .refused(failure.response)
            }
        }
        return request.path.hasPrefix("/v1/providers/") ? .fleetEngine(request, grpc: nil) : nil
    }

    /// The answer as the request came: a gRPC call's answer carries the vehicle it updated.
    /// Each gRPC call is counted here, once it is answered.
    private func answer(_ response: HTTPResponse, to request: HTTPRequest, grpc: GRPCCalls.Translated?) -> HTTPResponse {
        guard GRPCCalls.isCall(request) else { return response }
        state.withLock { $0.statistics.grpcCalls += 1 }
        return grpc.map { GRPCCalls.answer(response, for: request, updated: $0.updated) } ?? response
    }

    private func serveAtOnce(_ request: HTTPRequest) -> HTTPResponse {
        guard request.method != "GET" else { return handle(request) }
        openUpdate(request)
        defer { closeUpdate(request) }
        return handle(request)
    }

    /// A REST request, or the one a gRPC call stands for: faults, latency, then `handle`.
    private func serve(_ request: HTTPRequest) async -> HTTPResponse {
        let plan = state.withLock { $0.plan }
        if plan.latency > .zero { try? await Task.sleep(for: plan.latency) }
        guard request.method != "GET" else { return handle(request) }
        openUpdate(request)
        defer { closeUpdate(request) }
        let applyAt = ContinuousClock.now + plan.updateLatency
        if plan.updateLatency > .zero, await !request.connection.hold(for: plan.updateLatency) {
            guard plan.appliesAbandonedUpdates else { return .googleError(499, "CANCELLED", "The client went away.") }
            try? await Task.sleep(until: applyAt)
            state.withLock { $0.statistics.abandonedUpdatesApplied += 1 }
        }
        return handle(request)
    }

    /// An update is open until answered; one arriving while another of the same vehicle is
    /// open is counted.
    private func openUpdate(_ request: HTTPRequest) {
        state.withLock { state in
            if state.openUpdates[request.path, default: 0] > 0 { state.statistics.overlappingUpdates += 1 }
            state.openUpdates[request.path, default: 0] += 1
        }
    }

    private func closeUpdate(_ request: HTTPRequest) {
        state.withLock { state in
            state.openUpdates[request.path]! -= 1
            if state.openUpdates[request.path] == 0 { state.openUpdates[request.path] = nil }
        }
    }

    /// The server it is served on when another started it (`EmulatorHost.start` with other
    /// services): its connection counts join the statistics, and `shutdown` stops it.
    public func attach(to server: HTTPServer) {
        self.server.withLock { $0 = server }
    }

    public var baseURL: String? { server.withLock { $0?.baseURL } }

    /// What the server saw at the connection layer (connections, HTTP/2 streams, GOAWAYs, resets).
    public var transportStatistics: HTTPServerStatistics.Counts? { server.withLock { $0?.statistics.current } }

    /// An update the HTTP/2 faults left unprocessed: whose fix, and when.
    public struct WithheldUpdate: Sendable {
        public let vehicle: VehicleIdentity
        public let fixTime: Int64
        public let at: ContinuousClock.Instant
    }

    /// Every update left unprocessed above a GOAWAY's last stream, in order (reads left out).
    public var withheldUpdates: [WithheldUpdate] {
        let withheld = server.withLock { $0?.statistics.withheldRequests } ?? []
        return withheld.compactMap { withheld in
            var request = withheld.request
            if GRPCCalls.isCall(request) {
                guard case .success(let call) = GRPCCalls.restRequest(for: request) else { return nil }
                request = call.rest
            }
            guard let target = Self.target(of: request.path),
                  let update = try? UpdateBodyValidator.validate(body: request.body, updateMask: request.query["updateMask"])
            else { return nil }
            return WithheldUpdate(vehicle: target.vehicle, fixTime: update.locationTimeMilliseconds, at: withheld.at)
        }
    }

    public func shutdown() async {
        let server = self.server.withLock { server in
            defer { server = nil }
            return server
        }
        await server?.shutdown()
    }

    // MARK: Inspection and control

    public func vehicle(_ identity: VehicleIdentity) -> Vehicle? { state.withLock { $0.vehicles[identity] } }

    public var vehicles: [VehicleIdentity: Vehicle] { state.withLock { $0.vehicles } }

    public var statistics: Statistics { state.withLock { $0.statistics } }

    /// Update requests received and not yet answered.
    public var openUpdates: Int { state.withLock { $0.openUpdates.values.reduce(0, +) } }

    /// Every distinct bearer token received, when the emulator records history (leak checks in tests).
    public var receivedTokens: Set<String> { state.withLock { $0.receivedTokens } }

    /// Registers a vehicle so that updates to it succeed when `requireExistingVehicles` is on.
    public func createVehicle(_ identity: VehicleIdentity) {
        state.withLock { state in
            if state.vehicles[identity] == nil {
                state.vehicles[identity] = Vehicle(lastLocation: .null, locationTimeMilliseconds: .min)
            }
        }
    }

    /// Stores a newer location for a vehicle as if another client had just updated it (the live
    /// relay, while a replay waits to retry): the update path's faults do not apply.
    public func storeLocation(of identity: VehicleIdentity, recordedAtMilliseconds time: Int64) {
        let stamp = RFC3339.format(milliseconds: time)
        let location: JSONValue = .object([
            "location": .object(["latitude": .number(1), "longitude": .number(1)]),
            "supplementalLocationTime": .string(stamp), "updateTime": .string(stamp),
        ])
        state.withLock { state in
            var vehicle = state.vehicles[identity] ?? Vehicle(lastLocation: .null, locationTimeMilliseconds: .min)
            vehicle.lastLocation = location
            vehicle.locationTimeMilliseconds = time
            state.vehicles[identity] = vehicle
        }
    }

    /// The next `count` update requests are answered with `fault` instead of being processed.
    public func injectFaults(_ fault: InjectedFault, count: Int) {
        state.withLock { $0.faults += Array(repeating: fault, count: count) }
    }

    public var faultPlan: FaultPlan {
        get { state.withLock { $0.plan } }
        set { state.withLock { $0.plan = newValue } }
    }

    /// From now on, requests carrying one of `tokens` are answered 401 UNAUTHENTICATED, though
    /// the tokens are valid: a client must mint new ones, not send the refused ones again.
    public func revoke(tokens: some Sequence<String>) {
        state.withLock { $0.revokedTokens.formUnion(tokens) }
    }

    /// Answers every request 503 for `duration`, as during an outage.
    public func goDown(for duration: Duration) {
        state.withLock { $0.downUntil = .now + duration }
    }

    // MARK: Serving

    func handle(_ request: HTTPRequest) -> HTTPResponse {
        let response = route(request)
        state.withLock { state in
            state.statistics.requests += 1
            state.statistics.responsesByStatus[response.status, default: 0] += 1
            if request.method != "GET" {
                let now = ContinuousClock.now
                if state.statistics.firstUpdateAt == nil { state.statistics.firstUpdateAt = now }
                state.statistics.lastUpdateAt = now
                state.statistics.updateRequests += 1
                state.statistics.updateResponsesByStatus[response.status, default: 0] += 1
            }
        }
        return response
    }

    private func route(_ request: HTTPRequest) -> HTTPResponse {
        if let downUntil = state.withLock({ $0.downUntil }), ContinuousClock.now < downUntil {
            return Self.error(503, "UNAVAILABLE", "The service is currently unavailable.")
        }
        if !state.withLock({ $0.quota.admit(perSecond: $0.plan.quotaPerSecond, now: .now) }) {
            return Self.error(429, "RESOURCE_EXHAUSTED", "Quota exceeded for quota metric 'Requests' of service 'fleetengine.googleapis.com'.")
        }
        guard let target = Self.target(of: request.path) else { return Self.error(404, "NOT_FOUND", "No such resource: \(request.path)") }
        let vehicle = target.vehicle
        let expectedMethod = vehicle.kind == .vehicle ? "PUT" : "PATCH"
        guard request.method == "GET" || request.method == expectedMethod else {
            return Self.error(405, "METHOD_NOT_ALLOWED", "\(request.method) is not supported on \(target.collection).")
        }
        if recordsHistory, let token = request.bearerToken { state.withLock { _ = $0.receivedTokens.insert(token) } }
        switch verifier.verify(authorizationHeader: request.header("Authorization"), vehicle: vehicle) {
        case .unauthenticated(let message)?:
            if message == TokenVerifier.expiredMessage { state.withLock { $0.statistics.expiredTokens += 1 } }
            return Self.error(401, "UNAUTHENTICATED", message)
        case .permissionDenied(let message)?: return Self.error(403, "PERMISSION_DENIED", message)
        case nil: break
        }
        if let token = request.bearerToken, state.withLock({ $0.revokedTokens.contains(token) }) {
            return Self.error(401, "UNAUTHENTICATED", "The token was revoked.")
        }
        guard target.provider.removingPercentEncoding == provider else {
            return Self.error(403, "PERMISSION_DENIED", "Provider \(target.provider) is not this project.")
        }
        return request.method == "GET" ? get(vehicle) : update(vehicle, request)
    }

    private func get(_ vehicle: VehicleIdentity) -> HTTPResponse {
        if let status = state.withLock({ $0.plan.vehicleReadStatus }) {
            return Self.error(status, status == 403 ? "PERMISSION_DENIED" : status == 404 ? "NOT_FOUND" : "UNAVAILABLE",
                              "Injected answer to a vehicle read.")
        }
        guard let stored = state.withLock({ $0.vehicles[vehicle] }) else {
            return Self.error(404, "NOT_FOUND", "Vehicle \(vehicle.id) does not exist.")
        }
        return .json(200, representation(vehicle, stored))
    }

    private func update(_ vehicle: VehicleIdentity, _ request: HTTPRequest) -> HTTPResponse {
        if let fault = nextFault(for: vehicle) {
            return Self.error(fault.status, fault.status == 429 ? "RESOURCE_EXHAUSTED" : "UNAVAILABLE", "Injected fault.",
                              headers: fault.retryAfter.map { [("Retry-After", $0)] } ?? [])
        }
        if state.withLock({ $0.plan.rejectedVehicles.contains(vehicle.id) }) {
            return Self.error(404, "NOT_FOUND", "Vehicle \(vehicle.id) does not exist.")
        }
        let unavailable = state.withLock { state in
            guard state.plan.unavailableVehicles.contains(vehicle.id) else { return false }
            state.statistics.unavailableVehicleRequests[vehicle.id, default: 0] += 1
            return true
        }
        if unavailable { return Self.error(503, "UNAVAILABLE", "The service is currently unavailable.") }
        let valid: UpdateBodyValidator.ValidUpdate
        do {
            valid = try UpdateBodyValidator.validate(body: request.body, updateMask: request.query["updateMask"])
        } catch {
            return Self.error(400, "INVALID_ARGUMENT", error.message)
        }
        let stored: Vehicle? = state.withLock { state in
            if requireExistingVehicles, state.vehicles[vehicle] == nil { return nil }
            var current = state.vehicles[vehicle] ?? Vehicle(lastLocation: .null, locationTimeMilliseconds: .min)
            if valid.locationTimeMilliseconds < current.locationTimeMilliseconds { current.backwardsUpdates += 1 }
            current.lastLocation = valid.lastLocation
            current.locationTimeMilliseconds = valid.locationTimeMilliseconds
            current.updates += 1
            current.pastLocationsReceived += valid.pastLocationTimes.count
            if recordsHistory { Self.recordHistory(of: &current, valid) }
            state.vehicles[vehicle] = current
            state.statistics.locationsReceived += 1 + valid.pastLocationTimes.count
            if valid.locationTimeMilliseconds >= state.latencyLocatedAfter {
                state.latency.record(milliseconds: WallClock.nowMilliseconds() - valid.locationTimeMilliseconds)
            }
            return current
        }
        guard let stored else { return Self.error(404, "NOT_FOUND", "Vehicle \(vehicle.id) does not exist.") }
        return .json(200, representation(vehicle, stored))
    }

    /// Past locations oldest first, then the last location: the order a history is meant to be read in.
    private static func recordHistory(of vehicle: inout Vehicle, _ update: UpdateBodyValidator.ValidUpdate) {
        let now = ContinuousClock.now
        vehicle.acceptedUpdateTimes.append(now)
        for time in update.pastLocationTimes + [update.locationTimeMilliseconds] where vehicle.receivedFixTimes.insert(time).inserted {
            vehicle.fixFirstReceived[time] = now
            if time < vehicle.newestReceivedFixTime { vehicle.fixesOutOfOrder += 1 }
            vehicle.newestReceivedFixTime = max(vehicle.newestReceivedFixTime, time)
        }
    }

    // MARK: Statistics over HTTP, for benchmarks running the emulator as a process

    /// `GET /_emulator/statistics[?newer_than=MS[&id_prefix=P]]`: counters, vehicles (and how many,
    /// of those whose id starts with P, hold a location newer than MS) and update latency percentiles. `POST /_emulator/reset-latency[?located_after=MS]`
    /// starts the percentiles afresh, counting only fixes located at or after MS. `POST
    /// /_emulator/quota?rps=N[&latency_ms=M]` sets the project quota (0 lifts it) and the time
    /// every answer takes (a real front end's, against which a concurrency limit means a rate).
    private func administer(_ request: HTTPRequest) -> HTTPResponse {
        switch (request.method, request.path) {
        case ("GET", "/_emulator/statistics"):
            let newerThan = request.query["newer_than"].flatMap { Int64($0) }
            let prefix = request.query["id_prefix"]?.removingPercentEncoding ?? ""
            let transport = transportStatistics
            return .json(200, state.withLock {
                Self.statisticsJSON($0, transport: transport, newerThan: newerThan, idPrefix: prefix, recordsHistory: recordsHistory)
            })
        case ("POST", "/_emulator/reset-latency"):
            let locatedAfter = request.query["located_after"].flatMap { Int64($0) } ?? .min
            state.withLock { ($0.latency, $0.latencyLocatedAfter) = (LatencyHistogram(), locatedAfter) }
            return .json(200, "{}")
        case ("POST", "/_emulator/quota"):
            let rps = request.query["rps"].flatMap { Double($0) } ?? 0
            let latency = request.query["latency_ms"].flatMap { Int64($0) } ?? 0
            state.withLock { ($0.plan.quotaPerSecond, $0.plan.latency) = (rps > 0 ? rps : nil, .milliseconds(latency)) }
            return .json(200, "{}")
        default:
            return Self.error(404, "NOT_FOUND", "No such resource: \(request.path)")
        }
    }

    private static func statisticsJSON(_ state: State, transport: HTTPServerStatistics.Counts?, newerThan: Int64?, idPrefix: String,
                                       recordsHistory: Bool) -> String {
        var body = JSONObjectWriter()
        let statistics = state.statistics
        body.add("requests", statistics.requests)
        body.add("bytes_received", transport?.bytesReceived ?? 0)
        body.add("bytes_sent", transport?.bytesSent ?? 0)
        body.add("throttled_requests", statistics.responsesByStatus[429] ?? 0)
        body.add("update_requests", statistics.updateRequests)
        body.add("accepted_updates", statistics.updateResponsesByStatus[200] ?? 0)
        body.add("locations_received", statistics.locationsReceived)
        body.add("vehicles", state.vehicles.count)
        body.add("backwards_updates", state.vehicles.values.reduce(0) { $0 + $1.backwardsUpdates })
        if recordsHistory {
            body.add("distinct_fixes_received", state.vehicles.values.reduce(0) { $0 + $1.receivedFixTimes.count })
        }
        if let newerThan {
            body.add("vehicles_newer_than", state.vehicles.count { $0.key.id.hasPrefix(idPrefix) && $0.value.locationTimeMilliseconds > newerThan })
        }
        var latency = JSONObjectWriter()
        latency.add("count", state.latency.count)
        latency.add("p50", Int(state.latency.percentile(0.5)))
        latency.add("p99", Int(state.latency.percentile(0.99)))
        latency.add("max", Int(state.latency.maximum))
        body.add("latency_ms", latency)
        return body.json
    }

    /// A queued one-off fault first, else one drawn from the fault plan.
    private func nextFault(for vehicle: VehicleIdentity) -> InjectedFault? {
        state.withLock { state in
            if !state.faults.isEmpty { return state.faults.removeFirst() }
            let draw = Double.random(in: 0..<1)
            if draw < state.plan.failRate { return InjectedFault(status: 503) }
            if draw < state.plan.failRate + state.plan.throttleRate { return InjectedFault(status: 429, retryAfter: "1") }
            return nil
        }
    }

    private func representation(_ vehicle: VehicleIdentity, _ stored: Vehicle) -> String {
        var body = JSONObjectWriter()
        let collection = vehicle.kind == .vehicle ? "vehicles" : "deliveryVehicles"
        body.add("name", "providers/\(provider)/\(collection)/\(vehicle.id)")
        if stored.lastLocation != .null { body.addRaw("lastLocation", stored.lastLocation.serialized()) }
        return body.json
    }

    /// What a path `/v1/providers/{provider}/{collection}/{id}` names; nil for any other path.
    /// Split as UTF-8 bytes: splitting a `String` by characters cost 4 % of the emulator's CPU.
    private static func target(of path: String) -> (provider: String, collection: String, vehicle: VehicleIdentity)? {
        let prefix = "/v1/providers/"
        guard path.hasPrefix(prefix) else { return nil }
        let segments = path.utf8.dropFirst(prefix.utf8.count).split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
            .map { String(Substring($0)) }
        // [provider, collection, id]
        guard segments.count == 3, let kind = kind(collection: segments[1]), let id = segments[2].removingPercentEncoding, !id.isEmpty
        else { return nil }
        return (segments[0], segments[1], VehicleIdentity(kind: kind, id: id))
    }

    private static func kind(collection: String) -> VehicleKind? {
        switch collection {
        case "vehicles": .vehicle
        case "deliveryVehicles": .deliveryVehicle
        default: nil
        }
    }

    private static func error(_ code: Int, _ status: String, _ message: String,
                              headers: [(name: String, value: String)] = []) -> HTTPResponse {
        .googleError(code, status, message, headers: headers)
    }
}

extension String {
    /// Decodes `%XX` escapes; nil when an escape is malformed or the result is not UTF-8.
    var removingPercentEncoding: String? {
        var bytes: [UInt8] = []
        var iterator = utf8.makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else { bytes.append(byte); continue }
            guard let high = iterator.next(), let low = iterator.next(),
                let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16)
            else { return nil }
            bytes.append(value)
        }
        return String(validating: bytes, as: UTF8.self)
    }
}

/// A project quota as Google's front ends keep it: a token bucket refilled at the quota's rate
/// and holding one second's worth.
struct QuotaBucket {
    private var tokens: Double?
    private var refilledAt = ContinuousClock.now

    /// Takes a token for one request; false past the quota. A nil quota admits everything (and
    /// the bucket starts full once a quota is set).
    mutating func admit(perSecond quota: Double?, now: ContinuousClock.Instant) -> Bool {
        guard let quota, quota > 0 else {
            tokens = nil
            return true
        }
        let elapsed = (now - refilledAt) / .seconds(1)
        refilledAt = now
        let available = min(quota, (tokens ?? quota) + elapsed * quota)
        guard available >= 1 else {
            tokens = available
            return false
        }
        tokens = available - 1
        return true
    }
}
