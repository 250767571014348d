import ArgumentParser
import InputFormats

extension BuiltInFormat: ExpressibleByArgument {}

/// What shape the topic's records have: the native event, a built-in format, or a mapping file.
struct InputOptions: ParsableArguments {
    @Option(help: "Shape of the topic's records: \(BuiltInFormat.allCases.map(\.rawValue).joined(separator: ", ")). `fleet-relay mapping show NAME` prints each as a mapping.")
    var inputFormat: BuiltInFormat = .native

    @Option(help: "A mapping file (YAML or JSON) saying where each event field comes from; instead of --input-format. Check it with `fleet-relay mapping check`.")
    var inputMapping: String?

    func validate() throws {
        if inputMapping != nil, inputFormat != .native {
            throw ValidationError("--input-mapping and --input-format exclude each other: a mapping file is a format of its own")
        }
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
    var name: String { inputMapping.map { "mapping \($0)" } ?? inputFormat.rawValue }
}
