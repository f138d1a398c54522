import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.yarn.conf.YarnConfiguration;

/**
 * What Hadoop's clients read for each key named: a YarnConfiguration, from the
 * configuration dir first on the classpath, as skein's driver makes its YarnClient's, with
 * HDFS's files loaded as its HDFS client loads them (HdfsConfiguration adds hdfs-default.xml
 * and hdfs-site.xml to every configuration). One JVM for every key: each costs seconds.
 * Run as a single source file: java -cp CONF_DIR:HADOOP_CLASSPATH YarnConfRead.java KEY...
 */
public class YarnConfRead {
  public static void main(String[] args) {
    HdfsConfiguration.init();
    YarnConfiguration conf = new YarnConfiguration();
    for (String key : args) {
      System.out.println(key + "=" + conf.get(key));
    }
  }
}
