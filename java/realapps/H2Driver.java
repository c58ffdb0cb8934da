package realapps;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;

/**
 * The H2 database (Debian's libh2-java) through JDBC: an in-memory database of ROWS rows,
 * GROUP BY scans and LOOKUPS point lookups made by THREADS threads, each on its own connection.
 * Every figure it prints is computed twice, by the database and by plain arithmetic, and the
 * run fails unless they agree; a test computes the same figures again from the arguments.
 *
 * <p>Usage: {@code java -cp h2.jar:CLASSES realapps.H2Driver ROWS LOOKUPS SCANS THREADS}.
 * Prints {@code rows=R lookups=L scans=S scan_sum=X lookup_sum=Y ok}. Each lookup is one call of
 * {@link #lookup}, so a profile that counts calls must find exactly LOOKUPS of them.
 */
public class H2Driver {
    static final String URL = "jdbc:h2:mem:realapps;DB_CLOSE_DELAY=-1";

    /** The value stored for row {@code id}. */
    static long value(int id) {
        return (id * 31L) % 1009;
    }

    /** The group of row {@code id}. */
    static int group(int id) {
        return id % 16;
    }

    /** The row the {@code i}-th lookup reads (1-based ids). */
    static int lookupId(int i, int rows) {
        return (int) ((i * 7919L) % rows) + 1;
    }

    /** One point lookup: the value of row {@code id}. */
    static long lookup(PreparedStatement select, int id) throws Exception {
        select.setInt(1, id);
        try (ResultSet result = select.executeQuery()) {
            if (!result.next()) {
                throw new IllegalStateException("no row " + id);
            }
            return result.getLong(1);
        }
    }

    /** One GROUP BY scan: the sum over groups of (group + 1) * SUM(val). */
    static long scan(Statement statement, int rows) throws Exception {
        long sum = 0;
        long count = 0;
        try (ResultSet result = statement.executeQuery(
                "SELECT grp, COUNT(*), SUM(val) FROM items GROUP BY grp ORDER BY grp")) {
            while (result.next()) {
                sum += (result.getInt(1) + 1) * result.getLong(3);
                count += result.getLong(2);
            }
        }
        if (count != rows) {
            throw new IllegalStateException("the scan counted " + count + " rows of " + rows);
        }
        return sum;
    }

    public static void main(String[] args) throws Exception {
        int rows = Integer.parseInt(args[0]);
        int lookups = Integer.parseInt(args[1]);
        int scans = Integer.parseInt(args[2]);
        int threads = Integer.parseInt(args[3]);
        try (Connection connection = DriverManager.getConnection(URL)) {
            try (Statement statement = connection.createStatement()) {
                statement.execute("CREATE TABLE items(id INT PRIMARY KEY, grp INT NOT NULL,"
                        + " val BIGINT NOT NULL, name VARCHAR(40))");
            }
            connection.setAutoCommit(false);
            try (PreparedStatement insert = connection.prepareStatement(
                    "INSERT INTO items VALUES (?, ?, ?, ?)")) {
                for (int id = 1; id <= rows; id++) {
                    insert.setInt(1, id);
                    insert.setInt(2, group(id));
                    insert.setLong(3, value(id));
                    insert.setString(4, "item-" + id);
                    insert.addBatch();
                    if (id % 1000 == 0 || id == rows) {
                        insert.executeBatch();
                    }
                }
            }
            connection.commit();
            connection.setAutoCommit(true);

            long scanSum = 0;
            try (Statement statement = connection.createStatement()) {
                for (int s = 0; s < scans; s++) {
                    scanSum += scan(statement, rows);
                }
            }

            long[] sums = new long[threads];
            List<Thread> workers = new ArrayList<>();
            Throwable[] failure = new Throwable[1];
            for (int t = 0; t < threads; t++) {
                final int worker = t;
                Thread thread = new Thread(() -> {
                    try (Connection own = DriverManager.getConnection(URL);
                         PreparedStatement select = own.prepareStatement(
                                 "SELECT val FROM items WHERE id = ?")) {
                        long sum = 0;
                        for (int i = worker; i < lookups; i += threads) {
                            sum += lookup(select, lookupId(i, rows));
                        }
                        sums[worker] = sum;
                    } catch (Throwable e) {
                        synchronized (failure) {
                            failure[0] = e;
                        }
                    }
                }, "lookup-" + t);
                workers.add(thread);
                thread.start();
            }
            for (Thread thread : workers) {
                thread.join();
            }
            if (failure[0] != null) {
                throw new RuntimeException("a lookup failed", failure[0]);
            }
            long lookupSum = 0;
            for (long sum : sums) {
                lookupSum += sum;
            }

            // The same figures by plain arithmetic.
            long expectedScan = 0;
            for (int id = 1; id <= rows; id++) {
                expectedScan += (group(id) + 1) * value(id);
            }
            expectedScan *= scans;
            long expectedLookup = 0;
            for (int i = 0; i < lookups; i++) {
                expectedLookup += value(lookupId(i, rows));
            }
            if (scanSum != expectedScan || lookupSum != expectedLookup) {
                System.out.println("WRONG scan_sum=" + scanSum + " expected " + expectedScan
                        + " lookup_sum=" + lookupSum + " expected " + expectedLookup);
                System.exit(3);
            }
            System.out.println("rows=" + rows + " lookups=" + lookups + " scans=" + scans
                    + " scan_sum=" + scanSum + " lookup_sum=" + lookupSum + " ok");
        }
    }
}
