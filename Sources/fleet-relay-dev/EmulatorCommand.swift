import ArgumentParser
import CommandLineSupport
import FleetAuth
import FleetEngineEmulator
import Foundation
import HTTPServing
import Logging
import ServiceLifecycle

struct EmulatorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "emulator",
        abstract: "Serve a Fleet Engine emulator that verifies vehicle tokens as Fleet Engine does.",
        discussion: """
            The same port also serves stand-ins for the signers' peers, all signing with --key-file:             a token service at /vehicle-token (--signer token-service), the IAM signJwt endpoint             (--signer iam --iam-url <this URL>) and the metadata server (GCE_METADATA_HOST=<host:port>).
            """)

    @Option(help: "Address to listen on.")
    var host = "127.0.0.1"

    @Option(help: "Port to listen on (0 picks a free one).")
    var port = 8470

    @Option(help: "Service-account key file whose tokens are accepted.")
    var keyFile: String

    @Flag(help: "Create a new throwaway key at --key-file first (it must not exist).")
    var generateKey = false

    @Option(help: "Provider (project id) served. Default: the key file's project_id.")
    var provider: String?

    @Flag(help: "Answer 404 for vehicles never created, as Fleet Engine does (default: create on first update).")
    var requireExistingVehicles = false

    @Option(help: "Share (0–1) of update requests answered 503, to exercise retries.")
    var failRate = 0.0

    @Option(help: "Share (0–1) of update requests answered 429 with Retry-After: 1.")
    var throttleRate = 0.0

    @Option(help: "A project quota: requests (reads and updates) per second through a token bucket holding one second's worth; past it 429 RESOURCE_EXHAUSTED without Retry-After, as Fleet Engine answers. Default: none.")
    var quotaRps: Double?

    @Option(help: "Milliseconds added before every answer.")
    var latencyMs = 0

    @Option(help: "Seconds after start at which an outage (--down-for) begins.")
    var downAfter = 0.0

    @Option(help: "Seconds of outage (every request answered 503). Default: none.")
    var downFor: Double?

    @Flag(help: "Keep every fix time received, to count distinct fixes in /_emulator/statistics (memory grows with traffic).")
    var recordHistory = false

    @Option(name: .customLong("reject-vehicle"), help: "A vehicle id answered 404 (repeatable).")
    var rejectedVehicles: [String] = []

    @Option(name: .customLong("fail-vehicle"), help: "A vehicle id whose updates are answered 503 every time (repeatable): a vehicle stuck in retries.")
    var failedVehicles: [String] = []

    @Option(help: "Milliseconds an update takes before it is applied: a slow backend.")
    var updateLatencyMs = 0

    @Flag(help: "Apply a slow update even when its client went away (reset the stream, closed the connection) before the answer, as a real server may.")
    var applyAbandonedUpdates = false

    @Option(help: "Serve HTTPS (HTTP/2 and HTTP/1.1 through ALPN) with this PEM certificate chain; needs --tls-key.")
    var tlsCert: String?

    @Option(help: "PEM private key of --tls-cert.")
    var tlsKey: String?

    @Option(help: ArgumentHelp(
        "Serve HTTPS with a new throwaway CA and server certificate written to DIR (ca.pem, server.pem, server-key.pem); give the relay --ca-file DIR/ca.pem.",
        valueName: "DIR"))
    var generateTls: String?

    @Flag(help: "HTTPS without HTTP/2: offer only http/1.1 by ALPN.")
    var noHttp2 = false

    @Option(help: "HTTP/2: SETTINGS_MAX_CONCURRENT_STREAMS advertised per connection.")
    var maxConcurrentStreams = 100

    @Option(help: "HTTP/2: send GOAWAY after every N requests of a connection, then close it once its streams finished.")
    var goawayEvery: Int?

    @Option(help: "HTTP/2: share (0–1) of requests reset with RST_STREAM instead of answered.")
    var resetRate = 0.0

    @Option(help: ArgumentHelp("Credentials the Schema Registry stand-in requires (HTTP basic). Default: none.", valueName: "user:password"))
    var schemaRegistryCredentials: String?

    @OptionGroup var logging: LoggingOptions

    func validate() throws {
        guard (0...1).contains(failRate), (0...1).contains(throttleRate), failRate + throttleRate <= 1 else {
            throw ValidationError("--fail-rate and --throttle-rate must be from 0 to 1 and add up to at most 1")
        }
        if let quotaRps, !(quotaRps > 0 && quotaRps.isFinite) { throw ValidationError("--quota-rps must be a positive number") }
        guard latencyMs >= 0, downAfter >= 0, (downFor ?? 0) >= 0 else {
            throw ValidationError("--latency-ms, --down-after and --down-for must not be negative")
        }
        guard (tlsCert == nil) == (tlsKey == nil) else { throw ValidationError("--tls-cert and --tls-key go together") }
        guard tlsCert == nil || generateTls == nil else {
            throw ValidationError("give --tls-cert/--tls-key or --generate-tls, not both")
        }
        guard (0...1).contains(resetRate) else { throw ValidationError("--reset-rate must be from 0 to 1") }
        guard !noHttp2 || tlsCert != nil || generateTls != nil else {
            throw ValidationError("--no-http2 needs HTTPS (--tls-cert/--tls-key or --generate-tls)")
        }
        guard maxConcurrentStreams >= 1, (goawayEvery ?? 1) >= 1 else {
            throw ValidationError("--max-concurrent-streams and --goaway-every must be at least 1")
        }
    }

    func run() async throws {
        logging.bootstrap()
        let logger = Logger(label: "fleet-engine-emulator")
        if generateKey { try Self.writeThrowawayKey(to: keyFile) }
        let key: ServiceAccountKey
        do {
            key = try ServiceAccountKey.load(path: keyFile)
        } catch {
            throw StartupError(error.message)
        }
        let emulator = FleetEngineEmulator(key: key, provider: provider ?? key.projectId,
                                           requireExistingVehicles: requireExistingVehicles, recordsHistory: recordHistory)
        emulator.faultPlan = .init(failRate: failRate, throttleRate: throttleRate, latency: .milliseconds(latencyMs),
                                   rejectedVehicles: Set(rejectedVehicles), unavailableVehicles: Set(failedVehicles),
                                   updateLatency: .milliseconds(updateLatencyMs), appliesAbandonedUpdates: applyAbandonedUpdates,
                                   quotaPerSecond: quotaRps)
        let options = EmulatorOptions(
            tls: try serverTLS(logger: logger).map { noHttp2 ? $0.withoutHTTP2() : $0 },
            http2: .init(maximumConcurrentStreams: maxConcurrentStreams, goAwayEveryRequests: goawayEvery, resetShare: resetRate))
        let server: HTTPServer
        do {
            server = try await EmulatorHost.start(
                [emulator, TokenServiceEmulator(key: key), GoogleAuthEmulator(signingKey: key),
                 SchemaRegistryEmulator(requiredCredentials: schemaRegistryCredentials)], host: host, port: port,
                options: options, path: emulator.path)
        } catch {
            throw StartupError("cannot listen on \(host):\(port): \(error)")
        }
        emulator.attach(to: server)
        let url = server.baseURL
        logger.info("Fleet Engine emulator listening on \(url) for provider \(emulator.provider)")
        let standIns = "token service \(url)\(TokenServiceEmulator.path), IAM signJwt \(url), Schema Registry \(url), "
            + (server.isSecure ? "no metadata server (it is plain HTTP: serve without TLS for it)"
                : "metadata server GCE_METADATA_HOST=\(url.dropFirst("http://".count))")
        logger.info("Stand-ins: \(standIns), signing as \(key.clientEmail)")
        let services = ServiceGroup(configuration: .init(
            services: [WaitForShutdown()], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await withThrowingTaskGroup(of: Void.self) { group in
            if let downFor {
                group.addTask {
                    guard (try? await Task.sleep(for: .milliseconds(Int64(downAfter * 1000)))) != nil else { return }
                    logger.info("Outage for \(downFor) s begins")
                    emulator.goDown(for: .milliseconds(Int64(downFor * 1000)))
                }
            }
            try await services.run()
            group.cancelAll()
        }
        let statistics = emulator.statistics
        logger.info("Emulator stopped after \(statistics.requests) requests; \(emulator.vehicles.count) vehicles held")
        await server.shutdown()
    }

    /// The certificate to serve, if any; problems stop startup with one line (exit 78).
    private func serverTLS(logger: Logger) throws -> ServerTLS? {
        do {
            if let generateTls {
                let tls = try ThrowawayTLS.generate(in: generateTls, hosts: [host])
                logger.info("Throwaway TLS certificate in \(generateTls); trust it with --ca-file \(tls.caFile)")
                return try tls.serverTLS()
            }
            if let tlsCert, let tlsKey { return try ServerTLS.load(certificateFile: tlsCert, keyFile: tlsKey) }
            return nil
        } catch {
            throw StartupError("\(error)")
        }
    }

    static func writeThrowawayKey(to path: String, projectId: String = "fleet-relay-local") throws {
        guard !FileManager.default.fileExists(atPath: path) else {
            throw StartupError("--generate-key: \(path) already exists; refusing to overwrite a key")
        }
        guard let json = ServiceAccountKey.generateKeyFileJSON(
            projectId: projectId, clientEmail: "fleet-relay@\(projectId).iam.gserviceaccount.com",
            privateKeyId: "local-\(UInt32.random(in: 0...UInt32.max))")
        else { throw StartupError("cannot generate an RSA key") }
        guard FileManager.default.createFile(atPath: path, contents: Data(json.utf8), attributes: [.posixPermissions: 0o600]) else {
            throw StartupError("cannot write key file \(path)")
        }
    }
}

/// A service that does nothing until graceful shutdown.
struct WaitForShutdown: Service {
    func run() async throws {
        try await gracefulShutdown()
    }
}
