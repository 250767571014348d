import FleetAuth
import FleetEngine
import Foundation
import JSON

/// Where each event field of a record comes from and how it is converted: the compiled form
/// of a mapping file (`MappingFile`) or a built-in format. Applied to a record's decoded
/// document, it yields the same event the native format would, under the same rules.
public struct InputMapping: Sendable {
    /// The event fields a mapping fills (the native event's names).
    public enum Field: String, CaseIterable, Sendable {
        case vehicleId = "vehicle_id"
        case latitude = "lat"
        case longitude = "lng"
        case recordedAt = "recorded_at"
        case heading
        case speed = "speed_mps"
        case accuracy = "accuracy_m"
        case altitude = "altitude_m"
        case sensor
        case kind
    }

    enum Origin: Sendable, Equatable, CustomStringConvertible {
        case path(ValuePath)
        case key
        case header(String)
        case timestamp
        case constant(JSONValue)

        var description: String {
            switch self {
            case .path(let path): path.description
            case .key: "the record key"
            case .header(let name): "header \(name)"
            case .timestamp: "the record timestamp"
            case .constant: "a constant"
            }
        }
    }

    enum SpeedUnit: String, Sendable, CaseIterable {
        case metersPerSecond = "m/s"
        case kilometersPerHour = "km/h"
        case milesPerHour = "mph"
        case knots

        var metersPerSecond: Double {
            switch self {
            case .metersPerSecond: 1
            case .kilometersPerHour: 1000.0 / 3600.0
            case .milesPerHour: 1609.344 / 3600.0
            case .knots: 1852.0 / 3600.0
            }
        }
    }

    enum TimeFormat: Sendable, Equatable {
        /// RFC 3339 text or epoch milliseconds, as in the native event.
        case automatic
        case rfc3339
        /// ISO 8601 without an offset, in the given zone.
        case local(TimeZone)
        /// Epoch time as a number or numeric text, in units per second (1, 1e3, 1e6, 1e9).
        case epoch(unitsPerSecond: Int64)
    }

    /// How one field is found and converted.
    struct Source: Sendable {
        /// Tried in order; the first present one is used.
        var origins: [Origin]
        /// Stands for a missing value.
        var fallback: JSONValue?
        /// Vendor values to ours, by their text.
        var valueMap: [String: JSONValue] = [:]
        var speedUnit: SpeedUnit = .metersPerSecond
        var timeFormat: TimeFormat = .automatic
        /// Text edits for identifiers: a prefix removed, then substrings replaced.
        var stripPrefix: String?
        var replacements: [(String, String)] = []
        /// Numeric text for a number, a whole number for text: for vendors that send either.
        var converts = false
    }

    /// Both coordinates from one array (GeoJSON: `[longitude, latitude]`).
    struct Coordinates: Sendable {
        var path: ValuePath
        var longitudeFirst: Bool
    }

    /// A record to leave out: committed and counted, neither sent nor dead-lettered.
    enum SkipRule: Sendable, CustomStringConvertible {
        case equals(ValuePath, JSONValue)
        case notEquals(ValuePath, JSONValue)
        case oneOf(ValuePath, [JSONValue])
        case absent(ValuePath)
        case emptyValue

        var description: String {
            switch self {
            case .equals(let path, let value): "\(path) is \(Self.text(value))"
            case .notEquals(let path, let value): "\(path) is not \(Self.text(value))"
            case .oneOf(let path, let values): "\(path) is one of \(values.map(Self.text).joined(separator: ", "))"
            case .absent(let path): "\(path) is absent"
            case .emptyValue: "the record has no value"
            }
        }

        private static func text(_ value: JSONValue) -> String { value.serialized() }
    }

    public let name: String
    var envelope: [ValuePath] = []
    var skipRules: [SkipRule] = []
    var sources: [Field: Source] = [:]
    var coordinates: Coordinates?
    var keyMustMatch = false
    /// Values come from Kafka Connect's JSON converter with schemas: the envelope's fields
    /// with a semantic type (Debezium's timestamps, decimals) are read by it (`ConnectSchema`).
    var readsConnectSchema = false

    init(name: String) {
        self.name = name
    }

    /// Whether a field comes from a record header. A consumer reads a record's headers only
    /// then: librdkafka parses them into a list for each record it is asked about, even one
    /// with none, at about 2 % of a backlog drain's CPU.
    public var readsHeaders: Bool {
        sources.values.contains { source in
            source.origins.contains { if case .header = $0 { true } else { false } }
        }
    }

    /// Whether a record without a value is skipped rather than rejected.
    var skipsEmptyValues: Bool {
        skipRules.contains { if case .emptyValue = $0 { true } else { false } }
    }
}
