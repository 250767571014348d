import Foundation

/// The `Retry-After` header: delay-seconds or an HTTP-date (RFC 9110 §10.2.3).
public enum RetryAfter {
    /// - Parameter now: what an HTTP-date is measured from; nil reads the clock, and only for an
    ///   HTTP-date (nearly every answer has no `Retry-After`; a default argument is evaluated at
    ///   every call).
    public static func seconds(from header: String?, now: Date? = nil) -> Double? {
        guard let header = header?.trimmingCharacters(in: .whitespaces), !header.isEmpty else { return nil }
        if let seconds = Double(header), seconds.isFinite, seconds >= 0 { return seconds }
        guard let date = httpDateFormatter.date(from: header) else { return nil }
        return max(0, date.timeIntervalSince(now ?? Date()))
    }

    private static var httpDateFormatter: DateFormatter {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        return formatter
    }
}
