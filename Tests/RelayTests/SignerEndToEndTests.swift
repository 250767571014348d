import FleetAuth
import FleetEngineEmulator
import FleetModel
import Foundation
import HTTPServing
import JSON
import MetricsTestKit
import RemoteSigners
import Synchronization
import Testing

/// Each signer, end to end through the binary: events in, every fix delivered with
/// tokens from that signer, tokens minted once per vehicle, and no secret in the
/// logs (at debug level), the metrics or the output.
extension IntegrationTests {
@Suite struct SignerEndToEndTests {
    enum Setup: String, CaseIterable, Sendable {
        case localKeyFile, tokenService, iamWithMetadataServer, iamWithKeyFileCredentials
    }

    static let headerSecret = "relay-s3cret-\(UUID().uuidString)"
    static let callerEmail = "relay-caller@harness-project.iam.gserviceaccount.com"
    static let tokenURIPlaceholder = "http://token-uri.invalid/token"
    /// The account the relay authenticates as to IAM with a key file (not the fleet account).
    static let callerKeyFileJSON = ServiceAccountKey.generateKeyFileJSON(
        projectId: "harness-project", clientEmail: callerEmail, privateKeyId: "caller-kid", tokenURI: tokenURIPlaceholder)!
    static let callerKey = try! ServiceAccountKey.parse(Array(callerKeyFileJSON.utf8), source: "caller key")

    /// The signer's peers on one port: the operator's token service and Google's auth endpoints.
    struct Peers {
        let tokenService: TokenServiceEmulator
        let google: GoogleAuthEmulator
        let server: HTTPServer

        init(harness: RelayHarness) async throws {
            tokenService = TokenServiceEmulator(key: harness.key, requiredHeader: ("X-Relay-Key", SignerEndToEndTests.headerSecret))
            google = GoogleAuthEmulator(signingKey: harness.key, callerKey: SignerEndToEndTests.callerKey)
            server = try await EmulatorHost.start([tokenService, google])
        }

        var secrets: [String] { tokenService.issuedTokens + google.issuedSecrets }
        var hostAndPort: String { String(server.baseURL.dropFirst("http://".count)) }
    }

    static func writeFile(_ text: String, mode: Int) -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("sa-\(UUID().uuidString).json").path
        _ = FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: mode])
        return path
    }

    /// The signer flags and environment for `setup`.
    func signerArguments(_ setup: Setup, peers: Peers) -> (arguments: [String], environment: [String: String]) {
        switch setup {
        case .localKeyFile:
            // Readable by others on purpose: startup must warn.
            return (["--key-file", Self.writeFile(RelayHarness.keyFileJSON, mode: 0o644)], [:])
        case .tokenService:
            return (["--signer", "token-service", "--token-url", peers.server.baseURL + TokenServiceEmulator.path,
                     "--provider", "harness-project"],
                    ["FLEET_RELAY_TOKEN_SERVICE_HEADER": "X-Relay-Key: \(Self.headerSecret)"])
        case .iamWithMetadataServer:
            // Service account and provider come from the metadata server.
            return (["--signer", "iam", "--iam-url", peers.server.baseURL], ["GCE_METADATA_HOST": peers.hostAndPort])
        case .iamWithKeyFileCredentials:
            let keyFile = Self.writeFile(Self.callerKeyFileJSON.replacingOccurrences(
                of: Self.tokenURIPlaceholder, with: peers.server.baseURL + GoogleAuthEmulator.oauthTokenPath), mode: 0o600)
            return (["--signer", "iam", "--iam-url", peers.server.baseURL, "--service-account", RelayHarness.sharedKey.clientEmail],
                    ["GOOGLE_APPLICATION_CREDENTIALS": keyFile, "GCE_METADATA_HOST": "127.0.0.1:1"])
        }
    }

    @Test(arguments: Setup.allCases)
    func deliversEverythingWithOneMintPerVehicleAndLeaksNoSecret(_ setup: Setup) async throws {
        let harness = try await RelayHarness(partitions: 2)
        let peers = try await Peers(harness: harness)
        let generated = GeneratedEvents(vehicles: 40, fixesPerVehicle: 5)
        try await harness.produce(generated.events.map(\.record))
        let metricsPort = try freeLoopbackPort()
        let (signerArguments, environment) = signerArguments(setup, peers: peers)
        let relay = try CommandLineTests.RunningProcess([
            "run", "--brokers", harness.cluster.bootstrapServers, "--topic", harness.topic, "--group", "signer-\(setup)",
            "--fleet-engine-url", harness.emulatorURL, "--ca-file", harness.caFile, "--kafka-property", "session.timeout.ms=6000",
            "--log-level", "debug", "--metrics-port", String(metricsPort), "--batch-linger-ms", "20",
        ] + signerArguments, environment: environment)

        try await harness.waitUntilEverythingIsDelivered(generated, group: "signer-\(setup)")
        let signerName = setup == .localKeyFile ? "local" : setup == .tokenService ? "token-service" : "iam"
        var metrics = ""
        try await eventually("the metrics count one mint per vehicle") {
            metrics = try await httpGet("http://127.0.0.1:\(metricsPort)/metrics").body
            return metricValue(metrics, "fleet_relay_tokens_minted_total", ["signer": signerName]) == 40
        }
        relay.process.terminate()
        let result = await relay.finish()
        #expect(result.status == 0, "stderr: \(result.stderrExcerpt(2000))")
        #expect(harness.backwardsUpdates == 0)
        #expect(harness.emulator.statistics.responsesByStatus[401] == nil && harness.emulator.statistics.responsesByStatus[403] == nil)
        switch setup {
        case .localKeyFile:
            #expect(result.stderr.contains("is readable by group or others (mode 644); restrict it to its owner (chmod 600)"))
        case .tokenService:
            #expect(peers.tokenService.statistics.tokensIssued == 40)
            #expect(peers.tokenService.statistics.unauthorized == 0)
        case .iamWithMetadataServer:
            #expect(peers.google.statistics.signedTokens == 40)
            #expect(peers.google.statistics.accessTokensFromMetadata == 1)
        case .iamWithKeyFileCredentials:
            #expect(peers.google.statistics.signedTokens == 40)
            #expect(peers.google.statistics.accessTokensFromGrants == 1)
        }

        // Every token Fleet Engine saw or a peer issued, the header secret, and the key's material.
        let keyLines = try #require(try JSONParser.parse(RelayHarness.keyFileJSON)["private_key"]?.stringValue)
            .split(separator: "\n").filter { !$0.hasPrefix("-----") }.map(String.init)
        let secrets = Array(harness.emulator.receivedTokens) + peers.secrets + [Self.headerSecret] + keyLines
        #expect(secrets.count > 40)
        for (name, text) in [("logs", result.stderr), ("output", result.stdout), ("metrics", metrics)] {
            let leaked = secrets.filter { text.contains($0) }
            #expect(leaked.isEmpty, "\(leaked.count) secrets in the \(name)")
            #expect(!text.contains("PRIVATE KEY") && !text.contains("eyJ"), "no key or JWT in the \(name)")
        }
        await peers.server.shutdown()
        await harness.shutdown()
    }

    @Test func tokenCommandPrintsADecodedTokenFromEachSigner() async throws {
        let harness = try await RelayHarness(partitions: 1)
        let peers = try await Peers(harness: harness)
        for setup in Setup.allCases {
            let (arguments, environment) = signerArguments(setup, peers: peers)
            let result = try await CommandLineTests.RunningProcess(
                ["token", "--vehicle", "dv-9", "--kind", "delivery_vehicle"] + arguments.filter { $0 != "--provider" && $0 != "harness-project" },
                environment: environment).finish()
            #expect(result.status == 0, "\(setup): \(result.stderr)")
            let lines = result.stdout.split(separator: "\n").map(String.init)
            let token = try #require(lines.first)
            let verifier = TokenVerifier(publicKey: harness.key.privateKey, keyId: harness.key.privateKeyId,
                                         serviceAccount: harness.key.clientEmail)
            #expect(verifier.verify(authorizationHeader: "Bearer " + token, vehicle: VehicleIdentity(kind: .deliveryVehicle, id: "dv-9")) == nil,
                    "\(setup)")
            #expect(lines.contains { $0.hasPrefix("claims:") && $0.contains(#""authorization":{"deliveryvehicleid":"dv-9"}"#) })
            #expect(lines.contains { $0.hasPrefix("expires:") })
        }
        await peers.server.shutdown()
        await harness.shutdown()
    }

    @Test func aSignerProblemAtStartupIsOneLine() async throws {
        let wrongScheme = try await CommandLineTests.RunningProcess(
            ["run", "--brokers", "b", "--topic", "t", "--signer", "token-service", "--token-url", "http://tokens.example.com/t"]).finish()
        #expect(wrongScheme.stderr.hasSuffix("--token-url uses plain http to a non-loopback host; credentials would travel in clear text (see 'fleet-relay run --help')\n"))
        let secret = "Bearer do-not-print-me"
        let badHeader = try await CommandLineTests.RunningProcess(
            ["run", "--brokers", "b", "--topic", "t", "--signer", "token-service", "--token-url", "https://tokens.example.com/t"],
            environment: ["FLEET_RELAY_TOKEN_SERVICE_HEADER": secret]).finish()
        #expect(badHeader.status == 78)
        #expect(badHeader.stderr == "fleet-relay: error: the token-service header must look like 'Name: value' (no ':' found)\n")
        let mixed = try await CommandLineTests.RunningProcess(
            ["run", "--brokers", "b", "--topic", "t", "--signer", "iam", "--key-file", "k"]).finish()
        #expect(mixed.stderr.hasPrefix("fleet-relay: error: --key-file applies to --signer local, not iam"))
        let noProvider = try await CommandLineTests.RunningProcess(
            ["run", "--brokers", "127.0.0.1:1", "--topic", "t", "--signer", "token-service", "--token-url", "https://tokens.example.com/t"]).finish()
        #expect(noProvider.status == 78)
        #expect(noProvider.stderr.hasPrefix("fleet-relay: error: --provider is required"))
    }
}
}

extension IntegrationTests.RelayFaultTests {
    @Test func aTokenForAnotherVehicleIsRejectedCountedAndNeverSent() async throws {
        let harness = try await RelayHarness(partitions: 1)
        let tokenService = TokenServiceEmulator(key: harness.key)
        tokenService.behaviour = .wrongVehicle
        let server = try await EmulatorHost.start([tokenService])
        let signer = TokenServiceSigner(configuration: .init(url: server.baseURL + TokenServiceEmulator.path), http: SignerHTTP())
        let metrics = TestMetrics()
        let tokens = TokenCache(signer: signer, metrics: metrics)
        let running = try harness.startRelay(group: "relay", tokens: tokens)
        let generated = GeneratedEvents(vehicles: 10, fixesPerVehicle: 3)
        try await harness.produce(generated.events.map(\.record))
        try await eventually("the relay refused tokens for every vehicle") {
            metrics.counterTotal(label: "fleet_relay_token_errors_total", dimensions: [("signer", signer.name), ("reason", "rejected_token")]) >= 10
        }
        #expect(harness.emulator.statistics.requests == 0, "no request carried a wrong token")
        tokenService.behaviour = .normal
        try await harness.waitUntilEverythingIsDelivered(generated, group: "relay")
        try await running.stop()
        #expect(running.relay.statistics.snapshot.deadLettered == 0)
        #expect(harness.emulator.statistics.responsesByStatus[403] == nil)
        await server.shutdown()
        await harness.shutdown()
    }
}

extension IntegrationTests.RelayFaultTests {
    /// Tokens that live 15 s, shorter than three default margins (300 s): each is used for about
    /// two thirds of its life and replaced before it expires. The emulator refuses a token from its
    /// `exp` second on, so a single expired token handed out would show as a 401.
    @Test func shortLivedTokensAreReplacedBeforeTheyExpireAndReused() async throws {
        let harness = try await RelayHarness(partitions: 2)
        defer { Task { await harness.shutdown() } }
        let warnings = Mutex<[String]>([])
        let metrics = TestMetrics()
        let tokens = TokenCache(signer: LocalKeySigner(key: harness.key, lifetimeSeconds: 15),
                                warn: { warning in warnings.withLock { $0.append(warning) } }, metrics: metrics)
        let mintCount = { metrics.counterTotal(label: "fleet_relay_tokens_minted_total") }
        let running = try harness.startRelay(group: "relay", tokens: tokens)
        let vehicles = (0..<4).map { "veh-\($0)" }
        var produced: [GeneratedEvents.Event] = []
        // Each vehicle sends a fix every 200 ms until it has gone through three tokens of its own.
        let deadline = ContinuousClock.now + .seconds(180)
        var step = Int64(0)
        let start = WallClock.nowMilliseconds()
        while mintCount() < 3 * vehicles.count, ContinuousClock.now < deadline {
            let batch = vehicles.enumerated().map { index, vehicle in
                GeneratedEvents.Event(vehicle: vehicle, latitude: 37, longitude: -122 + Double(index) / 100,
                                      recordedAt: start + step * 200 + Int64(index))
            }
            try await harness.produce(batch.map(\.record))
            produced += batch
            step += 1
            try await Task.sleep(for: .milliseconds(200))
        }
        try await eventually("every fix arrived") { harness.lostEvents(produced).isEmpty }
        try await running.stop()
        let statistics = harness.emulator.statistics
        #expect(statistics.expiredTokens == 0 && statistics.responsesByStatus[401] == nil, "no request carried an expired token")
        let minted = Int(mintCount())
        #expect(minted >= 3 * vehicles.count)
        #expect(minted * 3 < statistics.updateRequests, "\(minted) tokens for \(statistics.updateRequests) requests: reused, not minted per request")
        #expect(warnings.withLock { $0.count } == 1)
        // A third of the life left when the token arrived: 15 s, or 14 s when minting crossed a second.
        let warning = warnings.withLock { $0.first } ?? ""
        #expect(["each is replaced 5 s before it expires", "each is replaced 4 s before it expires"].contains { warning.contains($0) },
                "\(warning)")
    }
}

/// Signer faults through the binary, beside the serialized integration suite.
@Suite(.serialized) struct SignerFaultTests {
    typealias Peers = IntegrationTests.SignerEndToEndTests.Peers

    func signerArguments(_ setup: IntegrationTests.SignerEndToEndTests.Setup, peers: Peers) -> (arguments: [String], environment: [String: String]) {
        IntegrationTests.SignerEndToEndTests().signerArguments(setup, peers: peers)
    }

    /// Fleet Engine refusing a token (401) makes the relay mint a new one and send with it. The
    /// emulator refuses only the tokens first issued (revoked, as after a key rotation) and
    /// accepts any other: a relay that minted anew but sent the refused token again would be
    /// refused for good. Seen by the token service: two tokens issued per vehicle.
    @Test func a401LeadsToANewlyMintedToken() async throws {
        let harness = try await RelayHarness(partitions: 1)
        let peers = try await Peers(harness: harness)
        let first = GeneratedEvents(vehicles: 5, fixesPerVehicle: 1)
        try await harness.produce(first.events.map(\.record))
        let (signerArguments, environment) = signerArguments(.tokenService, peers: peers)
        let relay = try IntegrationTests.CommandLineTests.RunningProcess([
            "run", "--brokers", harness.cluster.bootstrapServers, "--topic", harness.topic, "--group", "refused-token",
            "--fleet-engine-url", harness.emulatorURL, "--ca-file", harness.caFile, "--kafka-property", "session.timeout.ms=6000",
            "--metrics-port", String(try freeLoopbackPort()), "--retry-initial-ms", "50", "--retry-max-ms", "200",
        ] + signerArguments, environment: environment)
        try await harness.waitUntilEverythingIsDelivered(first, group: "refused-token")
        let firstTokens = peers.tokenService.issuedTokens
        #expect(firstTokens.count == 5)
        harness.emulator.revoke(tokens: firstTokens)
        // RS256 signs deterministically and `iat` counts whole seconds: a token minted again
        // within the same second is the refused token itself. Fleet Engine would refuse it too.
        let lastIssuedAt = try firstTokens.map { try JWT.decode($0).claims["iat"]?.numberValue ?? 0 }.max() ?? 0
        try await eventually("the clock is past the second the refused tokens were issued in") {
            Date().timeIntervalSince1970 >= lastIssuedAt + 1
        }

        let second = GeneratedEvents(vehicles: 5, fixesPerVehicle: 1, startingAfter: first)
        try await harness.produce(second.events.map(\.record))
        try await harness.waitUntilEverythingIsDelivered(GeneratedEvents(events: first.events + second.events), group: "refused-token")
        relay.process.terminate()
        let result = await relay.finish()
        #expect(result.status == 0, "stderr: \(result.stderrExcerpt(2000))")
        #expect(harness.emulator.statistics.updateResponsesByStatus[401] == 5, "each cached token refused once, then never sent again")
        #expect(peers.tokenService.statistics.tokensIssued == 10, "one token, then a new one after the 401")
        #expect(peers.tokenService.statistics.issuedPerVehicle.values.allSatisfy { $0 == 2 },
                "\(peers.tokenService.statistics.issuedPerVehicle)")
        await peers.server.shutdown()
        await harness.shutdown()
    }

    /// The token service cannot sign for one vehicle, whose fix is the partition's first
    /// record: the other vehicles' fixes behind it are delivered, yet a second Kafka client
    /// sees no offset committed past the waiting record while it waits; once tokens come,
    /// it is delivered and the partition committed to its end.
    @Test func nothingIsCommittedPastARecordWaitingForAToken() async throws {
        let harness = try await RelayHarness(partitions: 1)
        let peers = try await Peers(harness: harness)
        let waiting = GeneratedEvents(vehicles: 1, fixesPerVehicle: 1, prefix: "no-token-")
        let flowing = GeneratedEvents(vehicles: 20, fixesPerVehicle: 2, prefix: "flowing-")
        try await harness.produce(waiting.events.map(\.record) + flowing.events.map(\.record))
        peers.tokenService.behaviour = .downFor(["no-token-0"])
        let (signerArguments, environment) = signerArguments(.tokenService, peers: peers)
        let relay = try IntegrationTests.CommandLineTests.RunningProcess([
            "run", "--brokers", harness.cluster.bootstrapServers, "--topic", harness.topic, "--group", "signer-outage",
            "--fleet-engine-url", harness.emulatorURL, "--ca-file", harness.caFile, "--kafka-property", "session.timeout.ms=6000",
            "--metrics-port", String(try freeLoopbackPort()), "--commit-interval-ms", "100",
            "--retry-initial-ms", "50", "--retry-max-ms", "200",
        ] + signerArguments, environment: environment)

        try await eventually("the vehicles behind the waiting record are delivered", timeout: .seconds(120)) {
            harness.lostEvents(flowing.events).isEmpty
        }
        try await eventually("the waiting vehicle was refused a token several times", timeout: .seconds(60)) {
            (peers.tokenService.statistics.refusedPerVehicle["no-token-0"] ?? 0) >= 5
        }
        let committed = try await harness.committedOffsets(group: "signer-outage")[0] ?? nil
        #expect(committed == nil || committed == 0, "committed at \(committed.map(String.init) ?? "nothing"), past offset 0 that waits")
        #expect(harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: "no-token-0")) == nil)

        peers.tokenService.behaviour = .normal
        try await harness.waitUntilEverythingIsDelivered(GeneratedEvents(events: waiting.events + flowing.events), group: "signer-outage")
        relay.process.terminate()
        let result = await relay.finish()
        #expect(result.status == 0, "stderr: \(result.stderrExcerpt(2000))")
        await peers.server.shutdown()
        await harness.shutdown()
    }
}
