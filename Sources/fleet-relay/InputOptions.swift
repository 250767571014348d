import ArgumentParser
import CommandLineSupport
import Egress
import FleetAuth
import Foundation
import InputFormats

extension BuiltInFormat: ExpressibleByArgument {}

/// What shape the topic's records have: the native event, a built-in format, or a mapping file.
struct InputOptions: ParsableArguments {
    @Option(help: "Shape of the topic's records: \(BuiltInFormat.allCases.map(\.rawValue).joined(separator: ", ")). `fleet-relay mapping show NAME` prints each as a mapping.")
    var inputFormat: BuiltInFormat = .native

    @Option(help: "A mapping file (YAML or JSON) saying where each event field comes from; instead of --input-format. Check it with `fleet-relay mapping check`.")
    var inputMapping: String?

    @Option(help: "Schema Registry URL: record values are framed for it (Avro or JSON Schema) and decoded with their writer's schema, then mapped by --input-format or --input-mapping.")
    var schemaRegistry: String?

    @Option(help: ArgumentHelp(
        "Schema Registry credentials for HTTP basic authentication. Never logged. Prefer the environment variable or --schema-registry-credentials-file: command lines are visible to other processes.",
        valueName: "user:password"))
    var schemaRegistryCredentials: String?

    @Option(help: "File holding the Schema Registry credentials as user:password (e.g. a mounted Secret).")
    var schemaRegistryCredentialsFile: String?

    func validate() throws {
        if inputMapping != nil, inputFormat != .native {
            throw ValidationError("--input-mapping and --input-format exclude each other: a mapping file is a format of its own")
        }
        if schemaRegistry == nil, schemaRegistryCredentials != nil || schemaRegistryCredentialsFile != nil {
            throw ValidationError("Schema Registry credentials need --schema-registry")
        }
        if schemaRegistryCredentials != nil, schemaRegistryCredentialsFile != nil {
            throw ValidationError("give --schema-registry-credentials or --schema-registry-credentials-file, not both")
        }
    }

    /// The registry client, or nil without `--schema-registry`. The URL must not carry
    /// credentials (they would be logged with it).
    func schemaSource(egress: Egress) throws(StartupError) -> (any SchemaSource)? {
        guard let schemaRegistry else { return nil }
        guard let url = URL(string: schemaRegistry), let scheme = url.scheme, ["http", "https"].contains(scheme), url.host != nil else {
            throw StartupError("--schema-registry must be an http or https URL")
        }
        guard url.user == nil, url.password == nil else {
            throw StartupError("--schema-registry must not hold credentials; use --schema-registry-credentials-file or FLEET_RELAY_SCHEMA_REGISTRY_CREDENTIALS")
        }
        return SchemaRegistryClient(baseURL: schemaRegistry, credentials: try credentials(), egress: egress)
    }

    /// The value is a secret: errors describe its shape, never its text.
    private func credentials() throws(StartupError) -> String? {
        guard let text = try SecretArgument.read(schemaRegistryCredentials, orFile: schemaRegistryCredentialsFile,
                                                 fileFlag: "--schema-registry-credentials-file") else { return nil }
        guard let colon = text.firstIndex(of: ":"), colon != text.startIndex else {
            throw StartupError("the Schema Registry credentials must look like user:password")
        }
        return text
    }



    /// The mapping to apply, nil for the native event (its own decoder). A mapping file that
    /// cannot be used stops startup with one line naming the place.
    func mapping() throws(StartupError) -> InputMapping? {
        if let inputMapping {
            do {
                return try MappingFile.load(path: inputMapping)
            } catch {
                throw StartupError("--input-mapping \(inputMapping): \(error)")
            }
        }
        return inputFormat == .native ? nil : inputFormat.mapping
    }

    /// For the startup log line.
    var name: String {
        (inputMapping.map { "mapping \($0)" } ?? inputFormat.rawValue) + (schemaRegistry.map { " through the Schema Registry at \($0)" } ?? "")
    }
}
