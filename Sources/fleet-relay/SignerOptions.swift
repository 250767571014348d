import ArgumentParser
import CommandLineSupport
import Egress
import FleetAuth
import Foundation
import Logging
import RemoteSigners

enum SignerKind: String, ExpressibleByArgument, CaseIterable, Sendable {
    case local
    case tokenService = "token-service"
    case iam
}

enum TokenScope: String, ExpressibleByArgument, CaseIterable, Sendable {
    /// One token per vehicle: least privilege.
    case vehicle
    /// One `"*"` token per kind, valid for every vehicle.
    case wildcard
}

extension TokenServiceSigner.ExpiryFormat: ExpressibleByArgument {}

/// Where vehicle tokens come from, and how they are cached.
struct SignerOptions: ParsableArguments {
    @Option(help: "Where vehicle tokens come from: local (a key file), token-service (your token server) or iam (keyless, IAM signJwt).")
    var signer: SignerKind = .local

    @Option(help: "Service-account key file (JSON) that signs vehicle tokens (--signer local).")
    var keyFile: String?

    @Option(help: "Token service URL, called as <url>?vehicle_id=ID&kind=KIND (--signer token-service). https, or http to loopback.")
    var tokenURL: String?

    @Option(help: "Query parameter naming the vehicle in token-service calls.")
    var tokenVehicleParam = "vehicle_id"

    @Option(help: "Query parameter naming the kind (vehicle or delivery_vehicle) in token-service calls.")
    var tokenKindParam = "kind"

    @Option(help: ArgumentHelp(
        "Header sent with token-service calls, e.g. 'Authorization: Bearer …'. Never logged. Prefer the environment variable or --token-service-header-file: command lines are visible to other processes.",
        valueName: "Name: value"))
    var tokenServiceHeader: String?

    @Option(help: "File holding the token-service header as 'Name: value' (e.g. a mounted Secret).")
    var tokenServiceHeaderFile: String?

    @Option(help: "Field of the token-service answer holding the token.")
    var tokenField = "token"

    @Option(help: "Field of the token-service answer holding the expiry.")
    var expiryField = "expiration"

    @Option(help: "How the expiry field counts: epoch (seconds since 1970) or seconds-from-now.")
    var expiryFormat: TokenServiceSigner.ExpiryFormat = .epoch

    @Option(help: "Service account the tokens are issued for (--signer iam). Default: the credentials' own account.")
    var serviceAccount: String?

    @Option(help: "IAM Credentials API base URL (--signer iam).")
    var iamURL = IAMSigner.defaultURL

    @Option(help: "Timeout of one call to the token service, IAM or the metadata server.")
    var signerTimeout = DurationArgument(argument: "10s")!

    @Option(help: "Seconds before a token's expiry at which it is replaced (at most a third of the token's lifetime).")
    var tokenRefreshMargin: Int = 300

    @Option(help: "Most vehicle tokens kept; the least recently used beyond it are dropped.")
    var tokenCacheSize = TokenCache.defaultCapacity

    @Option(help: "vehicle: one token per vehicle (least privilege). wildcard: one \"*\" token per kind for all vehicles, if your security model allows it.")
    var tokenScope: TokenScope = .vehicle

    func validate() throws {
        guard (0..<1800).contains(tokenRefreshMargin) else {
            throw ValidationError("--token-refresh-margin must be from 0 to 1799 seconds")
        }
        guard tokenCacheSize >= 1 else { throw ValidationError("--token-cache-size must be at least 1") }
        guard signerTimeout.duration >= .milliseconds(100) else { throw ValidationError("--signer-timeout must be at least 100ms") }
        let flagsOfOtherSigners: [(flag: String, given: Bool, signer: SignerKind)] = [
            ("--key-file", keyFile != nil, .local),
            ("--token-url", tokenURL != nil, .tokenService),
            ("--token-service-header", tokenServiceHeader != nil, .tokenService),
            ("--token-service-header-file", tokenServiceHeaderFile != nil, .tokenService),
            ("--service-account", serviceAccount != nil, .iam),
        ]
        for option in flagsOfOtherSigners where option.given && option.signer != signer {
            throw ValidationError("\(option.flag) applies to --signer \(option.signer.rawValue), not \(signer.rawValue)")
        }
        switch signer {
        case .local:
            guard keyFile != nil else { throw ValidationError("--signer local needs --key-file") }
        case .tokenService:
            guard let tokenURL else { throw ValidationError("--signer token-service needs --token-url") }
            if let problem = URLText.insecurityReason(tokenURL) { throw ValidationError("--token-url \(problem)") }
            guard tokenServiceHeader == nil || tokenServiceHeaderFile == nil else {
                throw ValidationError("give --token-service-header or --token-service-header-file, not both")
            }
        case .iam:
            if let problem = URLText.insecurityReason(iamURL) { throw ValidationError("--iam-url \(problem)") }
        }
    }

    /// A configured signer with what startup logs about it (never a secret).
    struct Setup {
        let signer: any VehicleTokenSigner
        /// The project the credentials belong to, the default Fleet Engine provider.
        let defaultProvider: String?
        let logMetadata: Logger.Metadata
    }

    /// Builds the signer: loads keys, resolves credentials. Problems are `StartupError`s.
    func makeSigner(environment: [String: String] = ProcessInfo.processInfo.environment, egress: Egress = .standard,
                    warn: (String) -> Void) async throws -> Setup {
        let http = SignerHTTP(timeout: signerTimeout.duration, egress: egress)
        switch signer {
        case .local:
            let key = try loadKey(keyFile!, warn: warn)
            return Setup(signer: LocalKeySigner(key: key), defaultProvider: key.projectId, logMetadata: [
                "signer": "local", "service_account": "\(key.clientEmail)", "key_id": "\(key.privateKeyId)",
            ])
        case .tokenService:
            var configuration = TokenServiceSigner.Configuration(url: tokenURL!)
            configuration.vehicleParameter = tokenVehicleParam
            configuration.kindParameter = tokenKindParam
            configuration.header = try header()
            configuration.tokenField = tokenField
            configuration.expiryField = expiryField
            configuration.expiryFormat = expiryFormat
            return Setup(signer: TokenServiceSigner(configuration: configuration, http: http), defaultProvider: nil, logMetadata: [
                "signer": "token-service", "token_url": "\(Self.withoutQuery(tokenURL!))",
                "token_service_header": "\(configuration.header.map { "\($0.name): <redacted>" } ?? "none")",
            ])
        case .iam:
            return try await iamSetup(environment: environment, http: http, warn: warn)
        }
    }

    func makeTokenCache(_ signer: any VehicleTokenSigner, logger: Logger) -> TokenCache {
        TokenCache(signer: signer, refreshMarginSeconds: Int64(tokenRefreshMargin), wildcard: tokenScope == .wildcard,
                   capacity: tokenCacheSize, warn: { logger.warning("\($0)") })
    }

    private func iamSetup(environment: [String: String], http: SignerHTTP, warn: (String) -> Void) async throws -> Setup {
        let credentials: ApplicationDefaultCredentials.Resolved
        do {
            credentials = try ApplicationDefaultCredentials.resolve(environment: environment, http: http)
        } catch {
            throw StartupError(error.message)
        }
        if let keyFile = credentials.keyFile, let warning = ServiceAccountKey.permissionWarning(path: keyFile) { warn(warning) }
        let metadata = credentials.source as? MetadataServer
        var account = serviceAccount ?? credentials.serviceAccount
        if account == nil, let metadata {
            do {
                account = try await metadata.serviceAccountEmail()
            } catch {
                throw StartupError("cannot learn the service account from the metadata server "
                    + "(\(SignerError.message(of: error))); set --service-account")
            }
        }
        var project = credentials.projectId
        if project == nil, let metadata { project = try? await metadata.projectId() }
        let signer = IAMSigner(serviceAccount: account!, iamURL: iamURL, credentials: CachedAccessToken(source: credentials.source),
                               http: http)
        return Setup(signer: signer, defaultProvider: project, logMetadata: [
            "signer": "iam", "service_account": "\(account!)", "credentials": "\(credentials.source.description)",
            "iam_url": "\(iamURL)",
        ])
    }

    private func loadKey(_ path: String, warn: (String) -> Void) throws -> ServiceAccountKey {
        do {
            let key = try ServiceAccountKey.load(path: path)
            if let warning = ServiceAccountKey.permissionWarning(path: path) { warn(warning) }
            return key
        } catch {
            throw StartupError(error.message)
        }
    }

    /// The token-service header from the flag (or its environment variable) or file.
    private func header() throws -> (name: String, value: String)? {
        guard let text = try SecretArgument.read(tokenServiceHeader, orFile: tokenServiceHeaderFile,
                                                 fileFlag: "--token-service-header-file") else { return nil }
        // The value is a secret: errors describe the shape, never the text.
        guard let colon = text.firstIndex(of: ":") else {
            throw StartupError("the token-service header must look like 'Name: value' (no ':' found)")
        }
        let name = text[..<colon].trimmingCharacters(in: .whitespaces)
        let value = text[text.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        guard !name.isEmpty, !value.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) else {
            throw StartupError("the token-service header must look like 'Name: value' with a non-empty name and value")
        }
        return (name, value)
    }

    /// The URL for logs: without its query and without `user:password@`, either of which may
    /// carry credentials.
    static func withoutQuery(_ url: String) -> String {
        let base = url.split(separator: "?", maxSplits: 1).first.map(String.init) ?? url
        guard let schemeEnd = base.range(of: "://"), let at = base[schemeEnd.upperBound...].firstIndex(of: "@"),
              !base[schemeEnd.upperBound..<at].contains("/") else { return base }
        return String(base[..<schemeEnd.upperBound]) + "<credentials>@" + String(base[base.index(after: at)...])
    }
}
